"""What a user runs for an in-process llama.cpp arm with llama.cpp's own
tools (``Backend.engine_command``): llama-server, whose speculative types
cover the built-in drafters that have an engine counterpart. The lab's loop
and llama-server's differ in their per-step overhead, so the line's speed
is the server's to measure (a ``llamacpp-server`` arm does)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from lab.api import EngineCommand
from lab.kit.command_line import llama_server

if TYPE_CHECKING:
    from lab.base.profile import Arm, RunSettings

LOOP_NOTE = ("measured on the lab's loop with llama.cpp in its process; llama-server's own loop costs "
             "differently per step (a llamacpp-server arm measures it)")


def _layers(n: int) -> str:
    # the library's -1 is every layer; llama-server reads -1 as "auto" and takes "all" for every layer
    return "all" if n < 0 else str(n)


def _spec(arm: Arm, target_layers: int) -> tuple[str, str | None, list[str], list[str]] | str:
    """(spec type, draft, its flags, notes) for the arm's drafter, or why
    llama.cpp has no counterpart."""
    if arm.drafter is None:
        return "none", None, [], []
    d: Mapping[str, Any] = arm.drafter_options
    n_max = [] if arm.n_max is None else ["--spec-draft-n-max", str(arm.n_max)]
    if arm.drafter == "draft-model" and d.get("model"):
        flags = list(n_max)
        layers = d.get("n_gpu_layers")
        flags += ["--spec-draft-ngl", _layers(target_layers if layers is None else int(layers))]
        if d.get("threads"):
            flags += ["--spec-draft-threads", str(d["threads"])]
        notes = ["llama-server gives the draft the target's context"] if d.get("n_ctx") else []
        return "draft-simple", str(d["model"]), flags, notes
    if arm.drafter == "ngram":
        size_n = int(d.get("max_ngram") or 3)
        flags = ["--spec-ngram-simple-size-n", str(size_n)]
        if arm.n_max is not None:
            flags += ["--spec-ngram-simple-size-m", str(arm.n_max)]
        return "ngram-simple", None, flags, [
            "llama.cpp's ngram-simple looks the last n-gram up at one length, without the lab's drafter's fall-back "
            "to shorter ones, and drafts only where at least that many tokens follow the match: its acceptance "
            "can differ"]
    return f"the {arm.drafter} drafter runs only in the lab's loop: llama.cpp has no speculative type that drafts this way"


def inprocess_command(arm: Arm, run: RunSettings, opts: Mapping[str, Any]) -> EngineCommand:
    """``opts``: the arm's options with the backend's defaults filled in."""
    if arm.model is None:
        return EngineCommand((), ("the arm names no model",))
    layers = int(opts.get("n_gpu_layers") or 0)
    spec = _spec(arm, layers)
    if isinstance(spec, str):
        return EngineCommand((), (spec,))
    spec_type, draft, flags, notes = spec
    n_batch = int(opts.get("n_batch") or 512)
    extra = [] if opts.get("extra_bufts", True) else ["--no-repack"]
    argv = llama_server(
        arm.model, spec_type=spec_type, draft=draft, spec_flags=tuple(flags), n_ctx=run.n_ctx,
        # the lab's context: every layer where it was told (0: none), a ubatch of at most 512
        n_gpu_layers=_layers(layers), batch=n_batch, ubatch=min(n_batch, 512), parallel=1, threads=run.threads,
        temperature=run.temperature, extra=tuple(extra),
    )
    if opts.get("batch_invariant"):
        notes = [*notes, "batch_invariant is the lab's own setting (one-token decodes padded to two rows), "
                 "which llama-server lacks: its speed will differ"]
    return EngineCommand(tuple(argv), (LOOP_NOTE, *notes))
