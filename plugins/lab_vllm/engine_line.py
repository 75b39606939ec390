"""vLLM's own command line for an arm (``Backend.engine_command``): ``vllm
serve`` with the engine arguments :mod:`.command` gives the server the lab
starts, less the lab's own (port, log level, per-request metrics, set
acceptance)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Mapping

from lab.api import EngineCommand
from lab.kit import hub_ref
from lab.kit.command_line import model_arg
from lab_vllm.command import speculative_config

if TYPE_CHECKING:
    from lab.base.profile import Arm, RunSettings


def _gguf(ref: str) -> bool:
    hub = hub_ref.parse(ref)
    return model_arg(ref).lower().endswith(".gguf") or (hub is not None and bool(hub.quant or hub.file))


def serve_command(arm: Arm, run: RunSettings, opts: Mapping[str, Any]) -> EngineCommand:
    if opts.get("url"):
        return EngineCommand((), (f"the arm attached to a server the lab did not start ({opts['url']}): "
                                  "its command line is the one it was started with",))
    if arm.model is None:
        return EngineCommand((), ("the arm names no model",))
    notes = []
    draft = str(opts["draft_model"]) if opts.get("draft_model") else None
    for ref, role in ((arm.model, "target"), (draft, "draft")):
        if ref and _gguf(ref):
            notes.append(f"the lab served the {role} as a Hugging Face directory it converted from the GGUF "
                         f"{ref} (16-bit weights); give vllm serve that directory or the repository it came from")
    streams = int(opts.get("concurrency") or 1)
    argv = ["vllm", "serve", model_arg(arm.model),
            "--max-model-len", str(opts.get("max_model_len") or run.n_ctx),
            "--gpu-memory-utilization", str(opts.get("gpu_memory_utilization") or 0.3),
            "--max-num-seqs", str(opts.get("max_num_seqs") or max(streams, 1)),
            # the lab serves float32 weights (its CPU build's choice); on a GPU the model's own type is usual
            "--dtype", "float32"]
    if opts.get("enforce_eager", True):
        argv.append("--enforce-eager")
    spec = speculative_config(opts, arm.n_max, model_arg(draft) if draft else None)
    if spec is not None:
        argv += ["--speculative-config", json.dumps(spec)]
    argv += [str(a) for a in opts.get("extra_args") or ()]
    return EngineCommand(tuple(argv), tuple(notes))
