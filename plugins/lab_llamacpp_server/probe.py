"""A llama-server arm's probe, through servers started as the arm starts
them; steps are timed whole (:attr:`lab.base.probe.Probe.prices_steps`).
Width 1 is the baseline's seconds per token; width w the arm's server at
n_max = w - 1 with set acceptance one half, the mean of logged steps that
kept all (and, apart, none). One server runs at a time."""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from lab.api import BackendContext, EngineFailure, EngineOOM, GenerationRequest
from lab.base.events import Cell, Event, StepEvent
from lab.base.probe import NOT_TRIED, OUT_OF_MEMORY, PRICES_STEPS, ProbeError, ProbeWidthCap, ProbeWidthsFailed
from lab.base.set_acceptance import SetAcceptance
from lab_llamacpp_server.command import DRAFT_N_MAX_FLAG

if TYPE_CHECKING:
    from lab.api import Backend
    from lab.base.profile import Arm

METHOD = "server-steps"
# The options that make an arm speculate; its baseline server runs without them.
SPECULATIVE_OPTIONS = ("spec_type", "draft_model", "mtp_model", "draft_n_min", "draft_p_min", "draft_ngl")
# Spec types whose every step drafts n_max (n-gram types draft only on a match).
BLOCK_SPEC_TYPES = frozenset(t for t, flag in DRAFT_N_MAX_FLAG.items() if flag == "--spec-draft-n-max")
# Steps a timed request must give each of a width's two figures, on average.
MIN_STEPS = 6
STEPS_PER_REQUEST = 32
# The set acceptance of every draft position: a step keeps all or none.
KEEP_RATE = 0.5
# Several streams: the share of drafted tokens the streams must have kept
# (the rest: the last step of each stream, cut by the token budget).
FULL_SHARE = 0.9
# Timed requests a width's figure is the median of, each on the same server.
TIMED_REQUESTS = 3
MIN_TOKENS = 48
WARMUP_TOKENS = 16
PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def refusal(spec_type: str, options: Mapping[str, Any]) -> str | None:
    """Why a server arm with these options cannot be priced by its server,
    or None when it can."""
    if options.get("url"):
        return "an attached server runs with its own flags, so the lab cannot start it at other widths"
    if spec_type not in BLOCK_SPEC_TYPES:
        return (f"--spec-type {spec_type} drafts only where its n-grams match, so no request makes every "
                "step draft w - 1 tokens")
    return None


def baseline_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The arm's options as its baseline server would run them."""
    return {k: v for k, v in options.items() if k not in SPECULATIVE_OPTIONS}


def _request(cell: Cell, max_tokens: int, n_max: int | None, full: tuple[float, ...] | None) -> GenerationRequest:
    return GenerationRequest(
        cell=cell, prompt=PROMPT, system=None, chat_template=False, max_tokens=max_tokens, temperature=0.0,
        seed=0, ignore_eos=True, n_max=n_max, acceptance=full,
    )


def _tokens(width: int) -> int:
    # a step lands w tokens when it keeps all, one when it keeps none
    return max(MIN_TOKENS, STEPS_PER_REQUEST * (width + 1) // 2)


def request_lengths(ctx: BackendContext, width: int) -> tuple[int, int]:
    """Tokens of a timed request and of the warmup one at ``width``: a run's
    probe sends requests as long as its cells (a server's first steps cost
    more than later ones), never shorter than the figures need."""
    own = _tokens(width)
    if ctx.probe_requests is None:
        return own, WARMUP_TOKENS
    tokens, warmup = ctx.probe_requests
    return max(own, int(tokens)), max(WARMUP_TOKENS, int(warmup))


def measure(
    backend_cls: type[Backend], plain_cls: type[Backend], arm: Arm, ctx: BackendContext, widths: Sequence[int],
    say: Callable[[str], None] = lambda _t: None,
) -> tuple[list[float], dict[str, Any]]:
    """Seconds per width as the module says, and notes: each width's server
    command line, steps and tokens. ``plain_cls`` runs the baseline of a
    backend that always speculates (llamacpp-mtp, llamacpp-dflash)."""
    spec_type = backend_cls.spec_type_of(arm.options)  # type: ignore[attr-defined]
    why = refusal(spec_type, arm.options)
    if why is not None:
        raise ProbeError(f"{arm.backend} / {arm.model}: cannot price by the server: {why}")
    streams = int(arm.options.get("concurrency") or 1)
    cap = _widest(arm, spec_type)
    if cap is not None and max(widths) > cap[0]:
        raise ProbeWidthCap(cap[0], cap[1])
    seconds: dict[int, float] = {}
    failed: dict[int, str] = {}
    per_width: dict[str, Any] = {}
    build: Any = None
    with tempfile.TemporaryDirectory(prefix="lab-server-probe-") as logs:
        inner_ctx = BackendContext(run=ctx.run, run_dir=logs, log=ctx.log, probe_requests=ctx.probe_requests)
        # narrowest first: a width that does not fit stops the wider ones, and the curve keeps those that ran
        for w in sorted(widths):
            if failed:
                failed[w] = f"{NOT_TRIED}: wider than width {min(failed)}"
                continue
            if w == 1:
                options = baseline_options(arm.options)
                if backend_cls.fixed_spec_type is not None:  # type: ignore[attr-defined]
                    # llamacpp-mtp / llamacpp-dflash always speculate: the baseline is the plain server
                    cls: type[Backend] = plain_cls
                    options = {k: v for k, v in options.items() if any(o.name == k for o in cls.options)}
                else:
                    cls = backend_cls
                probe_arm = dataclasses.replace(
                    arm, name="probe-w1", backend=cls.name, options=options, n_max=None, acceptance=None,
                    is_baseline=True)
            else:
                cls = backend_cls
                rate = KEEP_RATE if streams == 1 else 1.0
                probe_arm = dataclasses.replace(
                    arm, name=f"probe-w{w}", n_max=w - 1, acceptance=SetAcceptance("rates", (rate,) * (w - 1)),
                    is_baseline=False, baseline="probe-w1")
            at = f", {streams} streams at once" if streams > 1 else ""
            say(f"width {w}: llama-server " + ("as the baseline" if w == 1 else
                                               f"n_max {w - 1}, each step keeping all its drafts or none" if streams == 1
                                               else f"n_max {w - 1} at full acceptance") + at)
            try:
                figure, note = _one_width(cls, probe_arm, inner_ctx, w)
            except (ProbeError, EngineFailure) as exc:
                if w == 1:
                    raise
                failed[w] = _failure(exc)
                say(f"width {w}: {failed[w]}")
                continue
            seconds[w] = figure
            per_width[str(w)] = note
            build = build or note.get("server_build")
    notes = {
        "prices": PRICES_STEPS, "priced_by": "llama-server", "spec_type": spec_type,
        "kept_none_s": {k: n["kept_none_s"] for k, n in per_width.items() if "kept_none_s" in n},
        "draft_model": arm.options.get("draft_model") or arm.options.get("mtp_model"),
        "server_build": build, "threads": ctx.run.threads or None,
        "n_gpu_layers": arm.options.get("n_gpu_layers"), "widths": per_width, "streams": streams,
    }
    if failed:
        raise ProbeWidthsFailed(seconds, failed, notes)
    return [seconds[w] for w in widths], notes


def _failure(exc: BaseException) -> str:
    """A width's failure in a few words: out of memory where the server said so."""
    cause = exc.__cause__ if isinstance(exc.__cause__, EngineFailure) else exc
    text = str(exc)[:300]
    if isinstance(exc, EngineFailure):
        # a request that killed the server: its last words say why
        text += _reason(exc.log_excerpt)
    return f"{OUT_OF_MEMORY}: {text}" if isinstance(cause, EngineOOM) else text


def _widest(arm: Arm, spec_type: str) -> tuple[int, str] | None:
    """The widest step this arm's server can take, where its draft caps it
    (a DFlash draft's trained block), with why; None where nothing does."""
    if spec_type not in ("draft-dflash", "draft-dspark") or not arm.options.get("draft_model"):
        return None
    from lab.kit import models
    from lab_llamacpp_server.dflash_block import max_draft

    most, why = max_draft(models.resolve(str(arm.options["draft_model"])), spec_type)
    return most + 1, why


def _one_width(cls: type[Backend], arm: Arm, ctx: BackendContext, width: int) -> tuple[float, dict[str, Any]]:
    """One server at one width: started, warmed up, timed, stopped."""
    steps: list[StepEvent] = []

    def emit(event: Event) -> None:
        if isinstance(event, StepEvent) and event.cell.round >= 1:
            steps.append(event)

    n_max = width - 1 if width > 1 else None
    full = arm.set_rates
    instance = cls(arm, ctx)
    try:
        try:
            instance.load(emit)
        except EngineFailure as e:
            # the server's own last words, not only that it stopped
            raise ProbeError(f"width {width}: {e}{_reason(e.log_excerpt)}") from e
        tokens, warmup = request_lengths(ctx, width)
        instance.generate(_request(Cell(arm.name, "probe", 0), warmup, n_max, full), emit, lambda: False)
        gens = [instance.generate(_request(Cell(arm.name, "probe", i), tokens, n_max, full), emit, lambda: False)
                for i in range(1, TIMED_REQUESTS + 1)]
        report = instance.report()
    finally:
        instance.close()
    note: dict[str, Any] = {"argv": report.get("argv"), "server_build": report.get("server_build"),
                            "tokens": len(gens[0].ids), "warmup_tokens": warmup, "gen_s": [g.gen_s for g in gens]}
    streams = int(arm.options.get("concurrency") or 1)
    if width == 1 or streams > 1:
        if any(not g.ids or g.gen_s <= 0 for g in gens):
            raise ProbeError(f"the server at width {width} generated nothing to time")
        # one stream's seconds per token
        per_request = [g.gen_s / len(g.ids) for g in gens]
        if width > 1:
            # every stream's drafts, as the server counted them: a stream's steps are its drafts over w - 1
            figures = [g.engine_report.get("concurrency") or {} for g in gens]
            drafted = [int(f.get("drafted_total") or 0) for f in figures]
            accepted = [int(f.get("accepted_total") or 0) for f in figures]
            if not all(drafted) or sum(accepted) < FULL_SHARE * sum(drafted):
                raise ProbeError(f"llama-server at n_max {width - 1} with {streams} streams kept {sum(accepted)} of "
                                 f"{sum(drafted)} drafted tokens where the probe set every one kept")
            per_request = [g.gen_s / (d / streams / (width - 1)) for g, d in zip(gens, drafted)]
            note.update(streams=streams, drafted=drafted, accepted=accepted)
    else:
        drafting = [s for s in steps if s.drafted == width - 1]
        kinds: dict[str, list[float]] = {}
        for kind, kept in (("all", width - 1), ("none", 0)):
            got = [[s.step_s for s in drafting if s.cell.round == i and s.accepted == kept]
                   for i in range(1, TIMED_REQUESTS + 1)]
            if sum(map(len, got)) < MIN_STEPS * TIMED_REQUESTS:
                raise ProbeError(
                    f"llama-server at n_max {width - 1} drafted {width - 1} tokens in {len(drafting)} of {len(steps)} "
                    f"steps, {sum(map(len, got))} of them keeping {kind} (at least {MIN_STEPS * TIMED_REQUESTS} "
                    "needed): its drafter stopped short (--spec-draft-p-min?)")
            # a request's mean where it has a few steps of the kind: the draws are random
            kinds[kind] = [statistics.fmean(g) for g in got if len(g) >= 2]
        per_request, none_per_request = kinds["all"], kinds["none"]
        note.update(steps=len(steps), full_steps=sum(1 for s in steps if s.drafted == width - 1 == s.accepted),
                    kept_none_steps=sum(1 for s in steps if s.drafted == width - 1 and s.accepted == 0),
                    per_request_kept_none_s=none_per_request, kept_none_s=statistics.median(none_per_request))
    # the median request: one request slowed by something else moves nothing
    note["per_request_s"] = per_request
    return statistics.median(per_request), note



def _reason(excerpt: str) -> str:
    """The line of a server's log that says why it stopped, where one does."""
    lines = [ln.strip() for ln in excerpt.splitlines() if ln.strip()]
    for ln in reversed(lines):
        low = ln.lower()
        if "error" in low or "exception" in low or "invalid" in low or "failed" in low:
            return f" (llama-server: {ln[-300:]})"
    return f" (llama-server: {lines[-1][-300:]})" if lines else ""
