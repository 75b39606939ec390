"""The options a vLLM arm takes and the server command line they make, run
as the module entry point (the CPU wheel's ``vllm serve`` looks itself up
under the wrong distribution name)."""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from lab.api import Option

# speculative_config methods that run a separate draft model
NEEDS_DRAFT_MODEL = {"draft_model", "eagle", "eagle3"}

OPTIONS: tuple[Option, ...] = (
    # only draft_model is required up front: an attached server's eagle or
    # eagle3 head is the server's business (a started arm checks at load)
    Option("spec_method", str, "none", "speculative_config method: none, ngram, draft_model, eagle, eagle3, mtp, suffix, ...",
           requires=(("draft_model", ("draft_model",)),)),
    Option("draft_model", str, None, "the draft model (a GGUF is converted to a Hugging Face directory)", model_ref=True),
    Option("prompt_lookup_min", int, None, "ngram: shortest n-gram matched", min=1, max=64),
    Option("prompt_lookup_max", int, None, "ngram: longest n-gram matched", min=1, max=64),
    Option("speculative_config", str, None, "JSON object merged into the speculative_config the lab builds"),
    Option("gpu_memory_utilization", float, 0.3, "--gpu-memory-utilization (the CPU build's share of the NUMA node)",
           min=0.01, max=1.0),
    Option("max_model_len", int, None, "--max-model-len (default: run.n_ctx)", min=16),
    Option("max_num_seqs", int, None, "--max-num-seqs (default: the arm's concurrency)", min=1, max=4096),
    Option("enforce_eager", bool, True, "--enforce-eager: no torch.compile (minutes of start-up on a CPU, not reused)"),
    Option("python", str, None, "interpreter with vLLM installed (default: the lab's own)"),
    Option("extra_args", list, [], "raw vLLM engine arguments, passed through after the lab's own", item_type=str),
    Option("health_timeout_s", float, 1200.0, "seconds to wait for /health", min=1, max=86400),
)


def speculative_config(options: Mapping[str, Any], n_max: int | None, draft_path: str | None,
                       set_rates: Sequence[float] | None = None) -> dict[str, Any] | None:
    """The ``--speculative-config`` object, or None for a baseline; set
    acceptance goes as vLLM's synthetic sampler with the lab's rates."""
    method = str(options.get("spec_method") or "none")
    if method == "none":
        return None
    config: dict[str, Any] = {"method": method}
    if n_max is not None:
        config["num_speculative_tokens"] = n_max
    if draft_path is not None:
        config["model"] = draft_path
    for key in ("prompt_lookup_min", "prompt_lookup_max"):
        if options.get(key) is not None:
            config[key] = int(options[key])
    if set_rates is not None:
        config["rejection_sample_method"] = "synthetic"
        config["synthetic_acceptance_rates"] = [float(r) for r in set_rates]
    extra = options.get("speculative_config")
    if extra:
        config.update(json.loads(extra))
    return config


def server_args(options: Mapping[str, Any], *, model_dir: str, served_name: str, port: int, n_max: int | None,
                draft_path: str | None, n_ctx: int, concurrency: int,
                set_rates: Sequence[float] | None = None) -> list[str]:
    """The arguments after ``python -m vllm.entrypoints.openai.api_server``."""
    args = [
        "--model", model_dir, "--served-model-name", served_name,
        "--host", "127.0.0.1", "--port", str(port),
        "--gpu-memory-utilization", str(options.get("gpu_memory_utilization") or 0.3),
        "--max-model-len", str(options.get("max_model_len") or n_ctx),
        "--max-num-seqs", str(options.get("max_num_seqs") or max(concurrency, 1)),
        "--dtype", "float32",
        "--uvicorn-log-level", "warning",
    ]
    if options.get("enforce_eager", True):
        args.append("--enforce-eager")
    spec = speculative_config(options, n_max, draft_path, set_rates)
    if spec is not None:
        # per-step drafted and accepted counts ride on each response
        args += ["--speculative-config", json.dumps(spec), "--per-request-spec-decode-metrics", "detailed"]
    args += [str(a) for a in (options.get("extra_args") or [])]
    return args
