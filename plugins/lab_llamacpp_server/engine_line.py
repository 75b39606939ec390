"""llama-server's own command line for an arm (``Backend.engine_command``):
the flags :mod:`.command` gives the server the lab starts, less the lab's
measurement flags (port, logs, metrics, set acceptance)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lab.api import EngineCommand
from lab.kit import hub_ref
from lab.kit.command_line import llama_server
from lab_llamacpp_server.command import DRAFT_N_MAX_FLAG, NEEDS_DRAFT_MODEL

if TYPE_CHECKING:
    from lab.base.profile import Arm, RunSettings


def server_command(arm: Arm, run: RunSettings, spec_type: str) -> EngineCommand:
    opts = arm.options
    if opts.get("url"):
        return EngineCommand((), (f"the arm attached to a server the lab did not start ({opts['url']}): "
                                  "its command line is the one it was started with",))
    if arm.model is None:
        return EngineCommand((), ("the arm names no model",))
    draft = opts.get("mtp_model") if spec_type == "draft-mtp" else None
    draft = draft or (opts.get("draft_model") if spec_type in NEEDS_DRAFT_MODEL or spec_type == "draft-mtp" else None)
    spec_flags: list[str] = []
    n_max_flag = DRAFT_N_MAX_FLAG.get(spec_type)
    if n_max_flag is not None and arm.n_max is not None:
        spec_flags += [n_max_flag, str(arm.n_max)]
    for key, flag in (("draft_n_min", "--spec-draft-n-min"), ("draft_p_min", "--spec-draft-p-min"),
                      ("draft_ngl", "--spec-draft-ngl")):
        if opts.get(key) is not None:
            spec_flags += [flag, str(opts[key])]
    n_ctx = int(opts.get("ctx_size") or run.n_ctx)
    parallel = int(opts.get("parallel") or 1)
    streams = int(opts.get("concurrency") or 1)
    notes: list[str] = []
    if streams > 1:
        # as the lab started it: a slot per stream, each with one stream's context
        parallel = max(parallel, streams)
        n_ctx *= parallel
        notes.append(f"measured with {streams} streams at once; --parallel {parallel} gives each its slot")
    if spec_type == "draft-mtp" and draft is None and hub_ref.parse(arm.model) is not None:
        notes.append("with -hf and --spec-type draft-mtp, llama-server takes an mtp-*.gguf the repository ships "
                     "before the MTP head inside the model; the lab's arm used the head inside the model")
    argv = llama_server(
        arm.model, server=opts.get("server"), spec_type=spec_type, draft=str(draft) if draft else None,
        spec_flags=tuple(spec_flags), n_ctx=n_ctx, n_gpu_layers=opts.get("n_gpu_layers"),
        flash_attn=opts.get("flash_attn"), batch=opts.get("batch"), ubatch=opts.get("ubatch"), parallel=parallel,
        threads=run.threads, temperature=run.temperature, template_kwargs=opts.get("chat_template_kwargs"),
        extra=tuple(str(a) for a in opts.get("extra_args") or ()),
    )
    return EngineCommand(tuple(argv), tuple(notes))
