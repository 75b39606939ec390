"""The engines' own command lines for an arm's configuration, as their users
type them (``Backend.engine_command``): a model named the way each tool
takes it, llama-server's flags, mlx-lm's ``mlx_lm.generate`` and z-lab's
``dflash generate``. Each flag here is one the tool's own parser lists
(tests/test_what_to_run.py parses the lines with it). Pure text: nothing is
loaded, fetched or built."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from lab.kit import hub_ref

# what stands for the prompt in a generating tool's line
PROMPT = "<your prompt>"


def model_arg(ref: str) -> str:
    """A model as a tool opens it: a file or directory that exists (``~``
    expanded, since a quoted ``~`` is not), a built-in model's file once it
    is built, anything else (a hub reference) as written."""
    from lab.kit import models

    path = Path(os.path.expanduser(ref))
    if path.exists():
        return str(path)
    built = models.built(ref)
    return str(built) if built is not None else ref


def thinking(kwargs_json: str | None) -> tuple[bool | None, dict[str, Any]]:
    """A chat template's JSON variables split into the thinking switch
    (None: not set) and the rest."""
    if not kwargs_json:
        return None, {}
    try:
        parsed = json.loads(kwargs_json)
    except ValueError:
        return None, {}
    if not isinstance(parsed, dict):
        return None, {}
    rest = dict(parsed)
    switch = rest.pop("enable_thinking", None)
    return (bool(switch) if isinstance(switch, bool) else None), rest


# -- llama.cpp -----------------------------------------------------------------------


def llama_model_flags(ref: str, draft: bool = False) -> list[str]:
    """How llama-server is told a model: ``-hf org/repo:QUANT`` (``-hfd`` for
    a draft), ``-hf org/repo -hff FILE`` (a draft: ``-hfd org/repo -md
    FILE``, llama.cpp reads ``-md`` as the repository's file then), else a
    path (``-m``, ``-md``)."""
    local = model_arg(ref)
    hub = hub_ref.parse(ref) if local == ref else None
    if hub is None:
        return ["-md" if draft else "-m", local]
    if hub.file is not None:
        return ["-hfd", hub.repo, "-md", hub.file] if draft else ["-hf", hub.repo, "-hff", hub.file]
    if hub.quant is not None:
        return ["-hfd" if draft else "-hf", f"{hub.repo}:{hub.quant}"]
    # a repository with no file or quantization named: llama.cpp picks its default quantization
    return ["-hfd" if draft else "-hf", hub.repo]


def llama_server(model: str, *, server: str | None = None, spec_type: str = "none", draft: str | None = None,
                 spec_flags: tuple[str, ...] = (), n_ctx: int, n_gpu_layers: int | str | None = None,
                 flash_attn: str | None = None, batch: int | None = None, ubatch: int | None = None,
                 parallel: int | None = 1, threads: int = 0, temperature: float | None = None,
                 template_kwargs: str | None = None, extra: tuple[str, ...] = ()) -> list[str]:
    """llama-server's command line for one configuration: the model (and
    draft), the speculative type and its flags (``spec_flags``, e.g.
    ``--spec-draft-n-max 3``), then the flags the write-ups set. A target
    named on the hub gets ``--no-mmproj``: ``-hf`` would also fetch and load
    a vision projector the repository ships, which the lab never loads."""
    argv = [server or "llama-server", *llama_model_flags(model)]
    if argv[1] in ("-hf",):
        argv.append("--no-mmproj")
    if spec_type != "none":
        if draft is not None:
            argv += llama_model_flags(draft, draft=True)
        argv += ["--spec-type", spec_type, *spec_flags]
    argv += ["-c", str(n_ctx)]
    if threads:
        argv += ["-t", str(threads)]
    for flag, value in (("-ngl", n_gpu_layers), ("-fa", flash_attn), ("-b", batch), ("-ub", ubatch),
                        ("--parallel", parallel)):
        if value is not None:
            argv += [flag, str(value)]
    switch, rest = thinking(template_kwargs)
    if switch is not None:
        # llama-server's own advice: --reasoning rather than enable_thinking in --chat-template-kwargs
        argv += ["--reasoning", "on" if switch else "off"]
    if rest:
        argv += ["--chat-template-kwargs", json.dumps(rest)]
    if temperature is not None:
        argv += ["--temp", f"{temperature:g}"]
    return argv + list(extra)


# -- MLX -------------------------------------------------------------------------------


def mlx_lm_generate(model: str, *, max_tokens: int, temperature: float, draft: str | None = None,
                    num_draft_tokens: int | None = None, enable_thinking: bool | None = None,
                    prefill_step_size: int | None = None, kv_bits: int = 0, chat_template: bool = True) -> list[str]:
    """mlx-lm's ``mlx_lm.generate`` for one configuration; the number of
    drafted tokens is always written out (its CLI's default is 3, its
    Python function's 2)."""
    argv = ["mlx_lm.generate", "--model", model_arg(model)]
    if draft is not None:
        argv += ["--draft-model", model_arg(draft), "--num-draft-tokens", str(num_draft_tokens or 2)]
    argv += ["--max-tokens", str(max_tokens), "--temp", f"{temperature:g}"]
    if prefill_step_size is not None:
        argv += ["--prefill-step-size", str(prefill_step_size)]
    if kv_bits:
        argv += ["--kv-bits", str(kv_bits)]
    if not chat_template:
        argv.append("--ignore-chat-template")
    elif enable_thinking is not None:
        argv += ["--chat-template-config", json.dumps({"enable_thinking": enable_thinking})]
    return argv + ["--prompt", PROMPT]


def zlab_dflash_generate(model: str, draft: str, *, block_size: int | None, draft_bits: int, max_tokens: int,
                         temperature: float, enable_thinking: bool | None) -> list[str]:
    """z-lab's ``dflash generate mlx`` (PyPI ``dflash``; ``python -m
    dflash.cli``, since dflash-mlx installs a ``dflash`` command too):
    ``--block-size`` counts the last target token, so block N drafts N - 1.
    It always renders the chat template (:data:`ZLAB_RAW_NOTE`)."""
    argv = ["python", "-m", "dflash.cli", "generate", "mlx", "--model", model_arg(model), "--draft", model_arg(draft)]
    if draft_bits:
        argv += ["--draft-bits", str(draft_bits)]
    if block_size:
        argv += ["--block-size", str(block_size)]
    argv += ["--max-new-tokens", str(max_tokens), "--temperature", f"{temperature:g}"]
    if enable_thinking is not None:
        argv += ["--reasoning", "on" if enable_thinking else "off"]
    return argv + [PROMPT]


ZLAB_RAW_NOTE = "the run sent prompts without a chat template; z-lab's command always renders it"


def zlab_draft_notes(draft: str) -> list[str]:
    """z-lab's loader fetches the draft by its hub repository id
    (``huggingface_hub.snapshot_download``), which refuses a local directory."""
    if hub_ref.parse(draft) is not None and model_arg(draft) == draft:
        return []
    return [f"z-lab's loader takes the draft as a hub repository id and refuses a local directory ({draft}): "
            "name the repository it came from"]


def gguf_problem(ref: str, role: str) -> str | None:
    """Why an MLX tool cannot open ``ref`` (its loaders take a model
    directory or a hub repository, not a GGUF file), or None."""
    hub = hub_ref.parse(ref)
    if model_arg(ref).lower().endswith(".gguf") or (hub is not None and (hub.quant or hub.file)):
        return f"the {role} is a GGUF file ({ref}): the lab's MLX reader loads it, the engine's own loader does not"
    return None


def draft_pair_problem(model: str | None, draft: Any) -> str | None:
    """Why a DFlash tool's command line cannot be written for this target
    and draft (one missing, or a GGUF its loader cannot open), or None."""
    if model is None or not draft:
        return "the arm names no model or no draft"
    for ref, role in ((model, "target"), (str(draft), "draft")):
        problem = gguf_problem(ref, role)
        if problem:
            return problem
    return None
