"""dflash-mlx's ``stream_dflash_generate`` as its ``dflash generate`` runs it
(``load_runtime_bundle``, the offline runtime context, no prefix cache;
greedy only). Steps are the engine's cycles: with ``cycle_events`` each
``CycleCompleteEvent`` gives the cycle's counts and its own seconds; without,
steps come from the cycle counters and the summary's acceptance history,
timed by the lab, and only a fixed block tells the drafted count."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping

from lab.api import Check, EngineCommand, EngineFailure, Generation, GenerationRequest, Option, with_defaults
from lab.base.events import Emit
from lab.kit import models
from lab.kit.checks import package_check
from lab.kit.engine_loop import EngineBackend, EngineCell, end_ids, engine_version, lab_loop

if TYPE_CHECKING:
    from lab.base.footprint import MemoryNeeds
    from lab.base.profile import Arm, RunSettings

INSTALL = "pip install dflash-mlx==0.1.8"
# verify modes whose block is the same every cycle (the drafted count follows from it)
FIXED_BLOCK = ("dflash", "off")


def doctor_checks() -> list[Check]:
    from lab.kit import mlx_platform

    gone = mlx_platform.unavailable()
    if gone:
        return [Check("dflash-mlx", False, f"{gone} (backend dflash-mlx)")]
    return [package_check("dflash-mlx", "dflash_mlx", INSTALL)]


class DFlashMlxBackend(EngineBackend):
    name = "dflash-mlx"
    bundle: Any = None
    runtime: Any = None
    block_size = 0
    engine_checks = (("dflash-mlx", ("mlx_lm", "dflash_mlx"), INSTALL),)
    description = "dflash-mlx's DFlash engine (dflash generate): tree drafting, adaptive block, its own per-cycle timers"
    options = (
        Option("draft", str, None, "the DFlash draft checkpoint directory (dflash's --draft)", required=True, model_ref=True),
        Option("block_size", int, 0, "tokens per block, the last target token included (0: n_max + 1 if the arm sets "
               "n_max, else the draft's own); the engine clamps it to the draft's trained block", min=0, max=1025),
        Option("verify_mode", str, "adaptive", "dflash's --verify-mode: adaptive shortens the block when acceptance is "
               "low (its default), dflash keeps it fixed, ddtree drafts a tree, off is its debug path",
               choices=("adaptive", "dflash", "ddtree", "off")),
        Option("draft_quant", str, "", "dflash's --draft-quant, e.g. w4:gs64 ('' or none: as stored)"),
        Option("verify_len_cap", int, 0, "dflash's --verify-len-cap: most tokens verified per target pass (0: the block)",
               min=0),
        Option("prefill_step_size", int, 2048, "dflash's --prefill-step-size", min=1),
        Option("cycle_events", bool, True, "the engine's per-cycle trace (draft and verify seconds of its own; it then "
               "evaluates each draft before verifying); false: its pipelined default, steps timed by the lab"),
        Option("enable_thinking", bool, True, "passed to the chat template"),
    )

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> list[str]:
        problems = []
        if not options.get("cycle_events", True) and options.get("verify_mode", "adaptive") not in FIXED_BLOCK:
            problems.append(f"cycle_events = false with verify_mode {options.get('verify_mode', 'adaptive')!r}: the engine "
                            "then reports no block per cycle, so drafted tokens are not known; use verify_mode dflash or "
                            "keep cycle_events")
        return problems

    @classmethod
    def engine_command(cls, arm: Arm, run: RunSettings) -> EngineCommand | None:
        """dflash-mlx's ``dflash generate`` (``python -m dflash_mlx.cli``:
        z-lab's package installs a ``dflash`` command too). It has no block
        size of its own: a block below the draft's trained one is written as
        ``--verify-len-cap``, the tokens verified a pass."""
        from lab.kit.command_line import PROMPT, draft_pair_problem, model_arg

        opts = with_defaults(cls.options, arm.options)
        problem = draft_pair_problem(arm.model, opts["draft"])
        if problem or arm.model is None:
            return EngineCommand((), (problem or "the arm names no model or no draft",))
        draft = str(opts["draft"])
        argv = ["python", "-m", "dflash_mlx.cli", "generate", "--model", model_arg(arm.model), "--draft",
                model_arg(draft), "--verify-mode", str(opts["verify_mode"])]
        if opts["draft_quant"]:
            argv += ["--draft-quant", str(opts["draft_quant"])]
        notes = []
        block = arm.n_max + 1 if arm.n_max else int(opts["block_size"] or 0)
        cap = int(opts["verify_len_cap"] or 0)
        if block:
            cap = min(cap, block) if cap else block
            notes.append(f"dflash generate drafts the draft's trained block; --verify-len-cap {cap} verifies "
                         f"{cap} tokens a pass, the nearest it has to the arm's block of {block} (its Python "
                         "API's block_tokens sets the block itself)")
        if cap:
            argv += ["--verify-len-cap", str(cap)]
        argv += ["--prefill-step-size", str(opts["prefill_step_size"]), "--max-tokens", str(run.max_tokens)]
        if not run.chat_template:
            argv.append("--no-chat-template")
        if opts["enable_thinking"] is False:
            notes.append("dflash generate has no thinking switch: the chat template's default applies")
        return EngineCommand((*argv, "--prompt", PROMPT), tuple(notes))

    @classmethod
    def memory_needs(cls, arm: Arm, run: RunSettings) -> MemoryNeeds | None:
        """dflash-mlx's target and draft (draft_quant "wN:gsG" quantizes it
        at load), the prompt in prefill_step_size chunks, a block verified a
        pass (verify_len_cap caps it)."""
        import platform
        import re

        from lab.base.footprint import MLX, MemoryNeeds, ModelLoad

        if arm.model is None or not arm.options.get("draft"):
            return None
        rows = min(int(arm.options.get("prefill_step_size") or 2048), run.n_ctx)
        block = int(arm.options.get("block_size") or 0) or (arm.n_max or 15) + 1
        cap = int(arm.options.get("verify_len_cap") or 0)
        width = min(block, cap) if cap else block
        quant = re.fullmatch(r"w(\d+)(?::gs(\d+))?", str(arm.options.get("draft_quant") or "").strip())
        loads = (
            ModelLoad("target", arm.model, run.n_ctx, n_ubatch=rows, n_outputs=width, n_verify=width),
            ModelLoad("draft", str(arm.options["draft"]), run.n_ctx, n_ubatch=rows, n_outputs=block, n_verify=block,
                      weight_bits=int(quant.group(1)) if quant else 0,
                      group_size=int(quant.group(2)) if quant and quant.group(2) else 64),
        )
        apple = platform.system() == "Darwin" and platform.machine() == "arm64"
        return MemoryNeeds(MLX, loads, accelerated=apple, process_bytes=430 << 20,
                          process_before_load=413 << 20)

    def load(self, emit: Emit) -> None:
        import dataclasses

        import mlx.core as mx
        from dflash_mlx.diagnostics import DiagnosticsConfig, TraceConfig
        from dflash_mlx.runtime.bundle import load_runtime_bundle
        from dflash_mlx.runtime.context import build_offline_runtime_context

        self._loading(emit, "loading target and draft (load_runtime_bundle)", 0.2)
        self._resolve_target()
        runtime = build_offline_runtime_context(
            verify_mode=str(self.opts["verify_mode"]), verify_len_cap=int(self.opts["verify_len_cap"]),
            prefill_step_size=int(self.opts["prefill_step_size"]),
        )
        if self.opts["cycle_events"]:
            runtime = dataclasses.replace(runtime, diagnostics=DiagnosticsConfig(trace=TraceConfig(cycle_events=True)))
        self.runtime = runtime
        mx.reset_peak_memory()
        self.bundle = load_runtime_bundle(
            model_ref=self.model_path, draft_ref=str(models.resolve(str(self.opts["draft"]))),
            draft_quant=str(self.opts["draft_quant"] or "") or None, verify_config=runtime.verify,
        )
        trained = int(self.bundle.draft_model.block_size)
        self.block_size = self._block_size(trained)
        if self.block_size > trained:
            raise ValueError(f"block_size {self.block_size} exceeds the draft's trained block of {trained} "
                             "(dflash-mlx would clamp it)")

    def generate(self, request: GenerationRequest, emit: Emit, cancelled: Callable[[], bool]) -> Generation:
        if request.temperature > 0:
            raise EngineFailure("dflash-mlx decodes greedily only (it has no sampler): set [run] temperature = 0")
        return super().generate(request, emit, cancelled)

    def _generate(self, request: GenerationRequest, emit: Emit, cancelled: Callable[[], bool]) -> Generation:
        from dflash_mlx.engine.events import CycleCompleteEvent, SummaryEvent, TokenEvent
        from dflash_mlx.runtime import get_stop_token_ids, stream_dflash_generate

        b = self.bundle
        tok = b.tokenizer
        hf = getattr(tok, "_tokenizer", tok)
        rendered, prompt = self._prompt(request, hf)
        detok = tok.detokenizer
        detok.reset()
        cell = EngineCell(request, emit)
        traced = bool(self.opts["cycle_events"])
        group: list[int] = []  # traced: the tokens of the cycle under way
        # untraced: per cycle, [tokens landed, seconds from the landing before its first]
        landings: dict[int, list[Any]] = {}
        summary: Any = None
        cycles: list[Any] = []
        stream = stream_dflash_generate(
            target_model=b.target_model, target_ops=b.target_ops, tokenizer=tok, draft_model=b.draft_model,
            draft_backend=b.draft_backend, prompt=rendered.text, max_new_tokens=request.max_tokens,
            block_tokens=self.block_size, stop_token_ids=[] if request.ignore_eos else get_stop_token_ids(tok),
            prompt_tokens_override=prompt, runtime_context=self.runtime,
            # ignore_eos masks the end tokens, as the lab's loops do (the engine's own suppression)
            suppress_token_ids=end_ids(hf) if request.ignore_eos else None,
        )
        try:
            for event in stream:
                cell.check(cancelled)
                if isinstance(event, TokenEvent):
                    cycle = int(event.cycles_completed)
                    if cycle > 0:
                        landing = landings.setdefault(cycle, [0, cell.since_last()])
                        landing[0] += 1
                        group.append(int(event.token_id))
                    detok.add_token(int(event.token_id))
                    cell.land([int(event.token_id)], detok.last_segment, False)
                elif isinstance(event, CycleCompleteEvent):
                    cycles.append(event)
                    verified = event.verify_token_count if event.verify_token_count is not None else event.block_len
                    cell.step(max(0, int(verified) - 1), int(event.acceptance_len), len(group),
                              step_s=event.cycle_total_us / 1e6, draft_s=event.draft_us / 1e6,
                              verify_s=event.verify_us / 1e6)
                    group = []
                elif isinstance(event, SummaryEvent):
                    summary = event
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()
        detok.finalize()
        tail = detok.last_segment  # what the detokenizer held back (reading it consumes it)
        if tail:
            cell.land([], tail, False)
        if summary is None:
            raise EngineFailure("dflash-mlx's stream ended without its SummaryEvent")
        if not traced:
            self._untraced_steps(cell, landings, summary, request.max_tokens)
        report: dict[str, Any] = {
            "engine": f"dflash-mlx {engine_version('dflash-mlx')}", "block_size": self.block_size,
            "verify_mode": self.runtime.verify.mode, "cycle_events": traced,
            "engine_generation_tokens": int(summary.generation_tokens),
            "engine_accepted_from_draft": int(summary.accepted_from_draft),
            "engine_cycles": int(summary.cycles_completed),
            "engine_acceptance_history": list(summary.acceptance_history),
            "engine_phase_us": dict(summary.phase_timings_us), "engine_elapsed_us": float(summary.elapsed_us),
            "engine_peak_memory_gb": summary.peak_memory_gb,
            "adaptive_block_reductions": int(summary.adaptive_block_reductions),
            "copyspec_hits": int(summary.copyspec_hits), "copyspec_tokens": int(summary.copyspec_tokens),
            "draft_sources": sorted({str(c.draft_source) for c in cycles if c.draft_source}),
            **self._memory(), **rendered.report(),
        }
        report["lab_loop"] = lab_loop("mlx-dflash", draft=str(self.opts["draft"]))
        report["loop_differences"] = self._differences(summary, cycles)
        if summary.fallback_ar:
            report["fallback"] = summary.fallback_reason or "autoregressive"
        return self._finish(cell, len(prompt), report)

    def _differences(self, summary: Any, cycles: list[Any]) -> list[str]:
        """How this cell's loop differed from the lab's DFlash loop."""
        out = ["a cycle commits the token the previous verify picked, then its accepted drafts "
               "(the first cycle lands only its drafts)"]
        mode = self.runtime.verify.mode
        if mode == "adaptive":
            out.append(f"adaptive block: shortened on {int(summary.adaptive_block_reductions)} occasions, "
                       f"{int(summary.adaptive_block_cycles)} cycles below the block")
        elif mode == "ddtree":
            out.append("tree drafting (ddtree): a cycle verifies a tree of candidates, not one chain")
        if summary.copyspec_hits:
            out.append(f"copy drafts (copyspec) on {int(summary.copyspec_hits)} cycles instead of the DFlash draft")
        if self.opts["cycle_events"]:
            out.append("per-cycle trace on: each draft is evaluated before its verify (no prefetch of the next draft)")
        return out

    def _untraced_steps(self, cell: EngineCell, landings: dict[int, list[Any]], summary: Any, budget: int) -> None:
        """Steps of the pipelined loop, one per cycle, drafted from the fixed
        block and the tokens left; a cycle that landed nothing has its time
        in the next one's seconds."""
        cap = int(self.opts["verify_len_cap"] or 0)
        # the engine's count of generated tokens at a cycle's start: 0 at the first, whose
        # commit holds the prompt's token, then that token and every one landed since
        before = 0
        for i, accepted in enumerate(summary.acceptance_history):
            landed, seconds = landings.get(i + 1, (0, 0.0))
            block = max(1, min(self.block_size, budget - before))
            verified = min(block, cap) if cap else block
            cell.step(verified - 1, int(accepted), int(landed), float(seconds))
            before = (1 if i == 0 else before) + int(landed)

    def close(self) -> None:
        self.bundle = None
        super().close()
