"""The lab's own decode loops for every backend that runs drafter plugins:
a backend adapts its engine to :class:`Target`, and :func:`generate` does
prompt processing, baseline decoding and speculative steps (draft, verify
``[last] + draft`` in one pass, keep by agreement, by speculative sampling
or at set rates, roll back, emit events)."""

from __future__ import annotations

import codecs
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from lab.api import Cancelled, Draft, Drafter, DrafterContext, Generation, GenerationRequest, Rehearsing
from lab.base.draft_policy import FIXED, next_length
from lab.base.events import (
    FIRST_PASS,
    SECOND_PASS,
    STEADY_PASS,
    SWITCH_PASS,
    Cell,
    Emit,
    Event,
    StepEvent,
    TokenEvent,
    now,
)
from lab.base.set_acceptance import conditional, draw_seed


class Target(Protocol):
    """What the loops need from a target engine. Every method returns only
    after the engine finished the work (synchronized), so clocks are honest;
    a target that is also :class:`Overlapping` offers one exception."""

    @property
    def n_past(self) -> int:
        """Tokens of context the engine holds."""

    n_ctx: int
    n_vocab: int

    def reset(self) -> None:
        """Forget all context (KV cache and any recurrent state)."""

    def decode(self, ids: Sequence[int], all_logits: bool) -> None:
        """Append ids at n_past; keep logits for the last row or every row."""

    def pick(self, row: int) -> int:
        """Sample a token from a row's logits with the configured sampling
        (greedy, or temperature with the engine's seeded draw)."""

    def probs(self, row: int) -> np.ndarray:
        """The sampling distribution of a row (temperature applied, EOG
        masked when ignoring EOS)."""

    def truncate(self, n_keep: int) -> None:
        """Drop context at positions >= n_keep."""

    def piece(self, token: int) -> bytes:
        """The bytes a token stands for."""


class DraftRefused(ValueError):
    """A drafter proposed what is no token of the target's vocabulary: the
    drafter's error, named with the ids, before any engine sees them."""


def checked_draft(drafter: Any, tokens: Sequence[Any], n_vocab: int) -> tuple[int, ...]:
    """``tokens`` as ids of a vocabulary of ``n_vocab``, or DraftRefused
    naming the drafter and the first few ids that are not."""
    out: list[int] = []
    bad: list[str] = []
    for t in tokens:
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)):
            bad.append(repr(t)[:40])
        elif not 0 <= int(t) < n_vocab:
            text = str(int(t)) if abs(int(t)) < 1 << 64 else f"{'-' if t < 0 else ''}2^{abs(int(t)).bit_length() - 1}+"
            bad.append(text)
        else:
            out.append(int(t))
    if bad:
        raise DraftRefused(f"drafter {drafter.name} proposed ids outside the vocabulary (0..{n_vocab - 1}): "
                           f"{', '.join(bad[:8])}{' ...' if len(bad) > 8 else ''}")
    return tuple(out)


@runtime_checkable
class Overlapping(Protocol):
    """A target whose decode may run while the loop sends the events of what
    landed, taking that host work off a GPU's critical path; ``pick`` and
    ``probs`` wait for the decode."""

    def submit(self, ids: Sequence[int], all_logits: bool) -> None:
        """Queue the decode of ids at n_past (logits for the last row or
        every row) and return, possibly before the engine has finished it."""

    def wait(self) -> None:
        """Return once the engine has finished every decode queued."""


@dataclass
class LoopStats:
    """Totals a loop keeps beside the events, possibly across an arm's cells."""

    steps: int = 0
    plain_tokens: int = 0
    # passes of another width than the one before (a replayed graph is rebuilt then)
    switch_steps: int = 0
    switch_plain: int = 0
    # the pass right after such a switch, where a CUDA graph is captured
    second_steps: int = 0
    second_plain: int = 0
    # plain decodes and their engine seconds by kind (lab.base.events.PASS_KINDS)
    first_plain: int = 0
    steady_plain: int = 0
    switch_plain_s: float = 0.0
    second_plain_s: float = 0.0
    steady_plain_s: float = 0.0
    empty_drafts: int = 0
    empty_draft_s: float = 0.0
    engine_s: float = 0.0
    draft_s: float = 0.0
    loop_s: float = 0.0
    extras: dict[str, float] = field(default_factory=dict)

    def overhead_s(self) -> float:
        """Time in the loop spent neither in the engine nor in the drafter."""
        return self.loop_s - self.engine_s - self.draft_s - self.empty_draft_s

    def add_plain(self, kind: str, seconds: float) -> None:
        """Count one plain decode of ``kind`` that kept the engine ``seconds``."""
        self.plain_tokens += 1
        if kind == SWITCH_PASS:
            self.switch_plain += 1
            self.switch_plain_s += seconds
        elif kind == SECOND_PASS:
            self.second_plain += 1
            self.second_plain_s += seconds
        elif kind == STEADY_PASS:
            self.steady_plain += 1
            self.steady_plain_s += seconds
        else:
            self.first_plain += 1

    def mark(self) -> LoopStats:
        """The totals now, for :meth:`cell_report` at the end of a cell."""
        return replace(self, extras=dict(self.extras))

    def cell_report(self, start: LoopStats) -> dict[str, Any]:
        """One cell's share of the totals, for the row's ``engine_report``
        (seconds by kind only where every plain decode's kind was told)."""
        report = {
            "plain_tokens": self.plain_tokens - start.plain_tokens,
            "switch_steps": self.switch_steps - start.switch_steps,
            "switch_plain": self.switch_plain - start.switch_plain,
            "second_steps": self.second_steps - start.second_steps,
            "second_plain": self.second_plain - start.second_plain,
            "empty_drafts": self.empty_drafts - start.empty_drafts,
            "empty_draft_s": self.empty_draft_s - start.empty_draft_s,
            "loop_overhead_s": self.overhead_s() - start.overhead_s(),
            # the steps loop_overhead_s was spent over
            "loop_steps": self.steps - start.steps,
        }
        told = [self.first_plain - start.first_plain, report["switch_plain"], report["second_plain"],
                self.steady_plain - start.steady_plain]
        if sum(told) == report["plain_tokens"]:
            report.update({
                "switch_plain_s": self.switch_plain_s - start.switch_plain_s,
                "second_plain_s": self.second_plain_s - start.second_plain_s,
                "steady_plain": told[3],
                "steady_plain_s": self.steady_plain_s - start.steady_plain_s,
            })
        return report


def pass_kind(last_width: int, width: int, since_switch: int) -> tuple[str, int]:
    """A pass's kind (lab.base.events.PASS_KINDS) after a pass of ``last_width``
    rows (0: the prompt) and ``since_switch`` passes since a switch, and the new count."""
    if last_width == 0:
        return FIRST_PASS, 0
    if last_width != width:
        return SWITCH_PASS, 1
    since_switch = since_switch and since_switch + 1
    return (SECOND_PASS if since_switch == 2 else STEADY_PASS), since_switch


class OutputStream:
    """Collects output ids, decodes text incrementally, emits token events.
    ``defer``: events wait until :meth:`flush`, stamped with the time each
    landing happened, so latency clocks do not move."""

    def __init__(self, target: Target, req: GenerationRequest, emit: Emit, defer: bool = False) -> None:
        self.target = target
        self.req = req
        self.emit = emit
        self.defer = defer
        self.ids: list[int] = []
        self.parts: list[str] = []
        # events, and landings as (ids, from_draft, when) until the flush
        self._queued: list[Event | tuple[tuple[int, ...], bool, float]] = []
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def land_step(self, drafted: Sequence[int], accepted: int, correction: int) -> list[int]:
        """Land a step's kept drafts and the target's own token; the tokens landed."""
        landed = list(drafted[:accepted]) + [correction]
        self.land(landed[:-1], from_draft=True)
        self.land(landed[-1:], from_draft=False)
        return landed

    def land(self, ids: Sequence[int], from_draft: bool) -> None:
        if not ids:
            return
        self.ids.extend(ids)
        if self.defer:
            self._queued.append((tuple(ids), from_draft, now()))
        else:
            self.emit(self._token_event(tuple(ids), from_draft, now()))

    def _token_event(self, ids: tuple[int, ...], from_draft: bool, t: float) -> TokenEvent:
        text = self._utf8.decode(b"".join(self.target.piece(tok) for tok in ids))
        self.parts.append(text)
        return TokenEvent(self.req.cell, text, ids, from_draft, t)

    def send(self, event: Event) -> None:
        if self.defer:
            self._queued.append(event)
        else:
            self.emit(event)

    def flush(self) -> None:
        queued, self._queued = self._queued, []
        for item in queued:
            self.emit(self._token_event(*item) if isinstance(item, tuple) else item)

    def text(self) -> str:
        """The output's text; a deferred stream has flushed first (the loops
        flush before they return)."""
        assert not any(isinstance(item, tuple) for item in self._queued), "text() before the last flush"
        return "".join(self.parts) + self._utf8.decode(b"", final=True)


@dataclass(frozen=True)
class TraceStep:
    """One target decode as the loop laid it out, so a check can replay the
    cell's exact batches: ``tokens`` at ``base``, ``accepted`` drafts kept
    (None for a plain decode), output ids landing from ``out_index``."""

    out_index: int
    base: int
    tokens: tuple[int, ...]
    accepted: int | None

    @property
    def verify(self) -> bool:
        return self.accepted is not None

    @property
    def landed(self) -> int:
        return 1 if self.accepted is None else self.accepted + 1


# Seeds the draws of set acceptance apart from the sampler's.
SET_ACCEPTANCE_STREAM = 0x5E7AC

# A wait for the engine longer than this found it still busy.
BUSY_WAIT_S = 50e-6


@dataclass(frozen=True)
class EnginePass:
    """What :func:`engine_pass` saw besides the decode: ``own_s``, the loop's
    seconds (a flush the engine did not outlast); ``held_s``, a pause, out of
    every clock; ``stop``, what ``cancelled`` said."""

    own_s: float = 0.0
    held_s: float = 0.0
    stop: bool = False


_NOTHING_ELSE = EnginePass()


def engine_pass(target: Target, overlap: Overlapping | None, out: OutputStream, ids: Sequence[int],
                all_logits: bool, cancelled: Callable[[], bool]) -> EnginePass:
    """Decode ids; on an Overlapping target, flush events and ask
    ``cancelled`` (which may hold a pause) while the engine runs."""
    if overlap is None:
        target.decode(ids, all_logits=all_logits)
        return _NOTHING_ELSE
    overlap.submit(ids, all_logits)
    t_q = now()
    try:
        out.flush()
        t_f = now()
        stop = cancelled()
        t_x = now()
    finally:
        t_w = now()
        overlap.wait()  # nothing is left in flight, even when a listener raised
    held = t_x - t_f
    if now() - t_w > BUSY_WAIT_S:
        # the engine outlasted the flush: it cost no time; a hold is out of every clock
        return EnginePass(held_s=held, stop=stop) if stop or held > BUSY_WAIT_S else _NOTHING_ELSE
    return EnginePass(own_s=t_f - t_q, held_s=held, stop=stop)


def plain_token(target: Target, out: OutputStream, stats: LoopStats, pending: int, started: float,
                after_decode: Callable[[], Any] = lambda: None) -> tuple[int, Any]:
    """One plain decode of ``pending`` where no draft fits, timed from
    ``started`` as the loops time it: the next pending token, and what
    ``after_decode`` (run right after the decode, inside the engine's time) gave."""
    check_room(target, 1)
    target.decode([pending], all_logits=False)
    after = after_decode()
    stats.engine_s += now() - started
    token = target.pick(-1)
    stats.plain_tokens += 1
    out.land([token], from_draft=False)
    stats.loop_s += now() - started
    return token, after


def check_room(target: Target, need: int) -> None:
    if target.n_past + need > target.n_ctx:
        raise RuntimeError(
            f"context full: {target.n_past} + {need} tokens exceeds n_ctx {target.n_ctx}; raise [run] n_ctx"
        )


def generate(
    target: Target,
    prompt_ids: Sequence[int],
    req: GenerationRequest,
    emit: Emit,
    cancelled: Callable[[], bool],
    drafter: Drafter | None = None,
    stats: LoopStats | None = None,
    trace: list[TraceStep] | None = None,
) -> Generation:
    """Run one cell: baseline when ``drafter`` is None, else speculative with
    up to ``req.n_max`` drafts a step (after :func:`rehearse` where asked)."""
    report: dict[str, Any] = {}
    # a rehearsal makes a transcript agree with the target; set acceptance ignores agreement
    if isinstance(drafter, Rehearsing) and req.temperature <= 0 and req.acceptance is None:
        report.update(rehearse(target, prompt_ids, req, cancelled, drafter))
    gen = _run(target, prompt_ids, req, emit, cancelled, drafter, stats, trace)
    gen.engine_report.update(report)
    return gen


def rehearse(
    target: Target, prompt_ids: Sequence[int], req: GenerationRequest, cancelled: Callable[[], bool],
    drafter: Rehearsing,
) -> dict[str, Any]:
    """Untimed passes for a drafter that learns from its output, until the
    output equals its transcript or ``max_rehearsals``."""
    assert isinstance(drafter, Drafter)
    t0 = now()
    passes = 0
    for _ in range(max(0, drafter.max_rehearsals)):
        if not drafter.wants_rehearsal(prompt_ids, req.cell):
            break
        gen = _run(target, prompt_ids, req, _silent, cancelled, drafter, LoopStats(), None)
        passes += 1
        drafter.rehearsed(gen.ids)
    return {"rehearsals": passes, "rehearsal_s": now() - t0}


def _silent(event: Event) -> None:
    return None


def _run(
    target: Target,
    prompt_ids: Sequence[int],
    req: GenerationRequest,
    emit: Emit,
    cancelled: Callable[[], bool],
    drafter: Drafter | None,
    stats: LoopStats | None,
    trace: list[TraceStep] | None,
) -> Generation:
    stats = stats if stats is not None else LoopStats()
    start = stats.mark()
    overlap = target if isinstance(target, Overlapping) else None
    out = OutputStream(target, req, emit, defer=overlap is not None)
    accept = acceptor(req)

    t0 = now()
    target.reset()
    check_room(target, len(prompt_ids) + 1)
    if drafter is not None:
        drafter.begin(prompt_ids, req.cell)
    target.decode(prompt_ids, all_logits=False)
    pending = target.pick(-1)
    t_prompt = now()
    out.land([pending], from_draft=False)
    context = list(prompt_ids) + [pending]

    n_max = req.n_max or 0
    # a policy other than fixed moves the length each step asks for; fixed asks n_max every step
    policy = req.draft_policy if drafter is not None and req.draft_policy != FIXED else None
    length = n_max
    step = 0  # this cell's steps; stats.steps counts the arm's
    last_width = 0  # rows of the last target pass; the prompt's pass counts as none
    # passes of last_width in a row since a counted switch (0: since the cell's first pass)
    since_switch = 0
    while len(out.ids) < req.max_tokens:
        if overlap is None and cancelled():
            raise Cancelled()
        t_a = now()
        remaining = req.max_tokens - len(out.ids)
        k = min(length, remaining - 1, target.n_ctx - target.n_past - 1) if drafter is not None else 0
        drafted: tuple[int, ...] = ()
        draft_probs = None
        if k > 0:
            assert drafter is not None
            d = drafter.draft(context, k)
            drafted = checked_draft(drafter, d.tokens[:k], target.n_vocab)
            draft_probs = d.probs
        t_b = now()
        if not drafted:
            if drafter is not None and k > 0:
                stats.empty_drafts += 1
                stats.empty_draft_s += t_b - t_a
            check_room(target, 1)
            if trace is not None:
                trace.append(TraceStep(len(out.ids), target.n_past, (pending,), None))
            ep = engine_pass(target, overlap, out, [pending], False, cancelled)
            if ep.stop:
                raise Cancelled()
            engine_s = now() - t_b - ep.own_s - ep.held_s
            stats.engine_s += engine_s
            pending = target.pick(-1)
            kind, since_switch = pass_kind(last_width, 1, since_switch)
            stats.add_plain(kind, engine_s)
            last_width = 1
            out.land([pending], from_draft=False)
            context.append(pending)
            stats.loop_s += now() - t_a - ep.held_s
            continue

        base = target.n_past
        out_index = len(out.ids)
        ep = engine_pass(target, overlap, out, [pending, *drafted], True, cancelled)
        if ep.stop:
            raise Cancelled()
        t_c = now()
        not_step = ep.own_s + ep.held_s
        accepted, correction = accept(target, drafted, draft_probs)
        target.truncate(base + 1 + accepted)
        t_d = now()
        if trace is not None:
            trace.append(TraceStep(out_index, base, (pending, *drafted), accepted))

        landed = out.land_step(drafted, accepted, correction)
        context.extend(landed)
        pending = correction
        stats.steps += 1
        kind, since_switch = pass_kind(last_width, len(drafted) + 1, since_switch)
        stats.switch_steps += kind == SWITCH_PASS
        stats.second_steps += kind == SECOND_PASS
        last_width = len(drafted) + 1
        stats.engine_s += t_c - t_b - not_step
        stats.draft_s += t_b - t_a
        out.send(
            StepEvent(
                req.cell, step, drafted=len(drafted), accepted=accepted, landed=len(landed),
                draft_s=t_b - t_a, verify_s=t_d - t_b - not_step, step_s=t_d - t_a - not_step, pass_kind=kind,
            )
        )
        step += 1
        if policy is not None:
            length = next_length(policy, length, len(drafted), accepted, n_max)
        stats.loop_s += now() - t_a - ep.held_s
    out.flush()
    t_end = now()
    return Generation(
        text=out.text(), ids=out.ids, prompt_tokens=len(prompt_ids),
        prompt_s=t_prompt - t0, gen_s=t_end - t_prompt,
        engine_report=stats.cell_report(start),
    )


Acceptor = Callable[[Target, Sequence[int], "Sequence[np.ndarray] | None"], tuple[int, int]]


def acceptor(req: GenerationRequest) -> Acceptor:
    """How a cell's verify keeps drafts, as ``(accepted, correction)``: set
    rates, agreement or speculative sampling, drawn from generators the request seeds."""
    if req.acceptance is not None:
        chances = conditional(req.acceptance)
        # its own stream, so the draws repeat whatever else samples
        set_rng = np.random.default_rng(
            [draw_seed(req.seed, req.cell.prompt, req.cell.round), SET_ACCEPTANCE_STREAM])
        return lambda target, drafted, _probs: accept_set(target, drafted, chances, set_rng)
    if req.temperature <= 0:
        return lambda target, drafted, _probs: accept_greedy(target, drafted)
    rng = np.random.default_rng(req.seed)
    return lambda target, drafted, probs: accept_sampled(target, drafted, probs, rng)


def accept_set(target: Target, drafted: Sequence[int], chances: Sequence[float],
               rng: np.random.Generator) -> tuple[int, int]:
    """Set acceptance: keep draft i with chance ``chances[i]`` given the
    ones before were kept; every row is still picked, so the step costs what
    a real one does."""
    for i in range(len(drafted)):
        y = target.pick(i)
        # a position past the rates given is never kept
        if i >= len(chances) or rng.random() >= chances[i]:
            return i, y
    return len(drafted), target.pick(len(drafted))


def accept_greedy(target: Target, drafted: Sequence[int]) -> tuple[int, int]:
    for i, tok in enumerate(drafted):
        y = target.pick(i)
        if y != tok:
            return i, y
    return len(drafted), target.pick(len(drafted))


def accept_sampled(
    target: Target, drafted: Sequence[int], draft_probs: Sequence[np.ndarray] | None, rng: np.random.Generator
) -> tuple[int, int]:
    """Speculative sampling: accept x with probability min(1, p(x)/q(x)), else
    draw from max(p - q, 0) renormalised (q one-hot for a drafter without
    probabilities); the output distribution is the target's either way."""
    for i, tok in enumerate(drafted):
        p = target.probs(i)
        if draft_probs is not None:
            q = np.asarray(draft_probs[i], dtype=np.float64)
            qx = float(q[tok])
        else:
            q = None
            qx = 1.0
        px = float(p[tok])
        if qx > 0 and rng.random() < min(1.0, px / qx):
            continue
        if q is None:
            residual = p.astype(np.float64).copy()
            residual[tok] = 0.0
        else:
            residual = np.maximum(p.astype(np.float64) - q, 0.0)
        total = residual.sum()
        if total <= 0:
            return i, int(rng.choice(len(p), p=p / p.sum()))
        return i, int(rng.choice(len(residual), p=residual / total))
    p = target.probs(len(drafted)).astype(np.float64)
    return len(drafted), int(rng.choice(len(p), p=p / p.sum()))


def softmax(logits: np.ndarray, temperature: float, masked: Sequence[int] = ()) -> np.ndarray:
    x = logits.astype(np.float64) / max(temperature, 1e-6)
    if len(masked):
        x[list(masked)] = -np.inf
    x -= x.max()
    e = np.exp(x)
    return e / e.sum()


class TargetDrafter(Drafter):
    """A draft model on any engine through :class:`Target`: its context kept
    in step with the lab's, k tokens drafted one at a time at the run's
    temperature. Subclasses set ``self.target`` in ``load``."""

    target: Target | None = None

    def __init__(self, options: Mapping[str, Any], ctx: DrafterContext) -> None:
        super().__init__(options, ctx)
        self._seen: list[int] = []  # tokens whose state the draft context holds
        self.rng = np.random.default_rng(ctx.seed + 1)

    def begin(self, prompt_ids: Sequence[int], cell: Cell) -> None:
        # Process the prompt now so it counts as prompt time, not draft time.
        assert self.target is not None
        self.target.reset()
        self._seen = []
        self._sync(list(prompt_ids))

    def _sync(self, context: list[int]) -> None:
        """Make the draft context hold exactly ``context[:-1]`` and decode the
        last token. Rejected draft tokens are dropped."""
        assert self.target is not None
        common = 0
        limit = min(len(self._seen), len(context) - 1)
        while common < limit and self._seen[common] == context[common]:
            common += 1
        if common < self.target.n_past:
            self.target.truncate(common)
        self._seen = self._seen[:common]
        todo = context[common:]
        self.target.decode(todo, all_logits=False)
        self._seen.extend(todo)

    def draft(self, context: Sequence[int], k: int) -> Draft:
        assert self.target is not None
        self._sync(list(context))
        sampled = self.ctx.temperature > 0
        tokens: list[int] = []
        probs: list[np.ndarray] = []
        for i in range(k):
            if sampled:
                p = self.target.probs(-1)
                tokens.append(int(self.rng.choice(len(p), p=p)))
                probs.append(p)
            else:
                tokens.append(self.target.pick(-1))
            if i + 1 < k:
                self.target.decode(tokens[-1:], all_logits=False)
                self._seen.append(tokens[-1])
        return Draft(tuple(tokens), probs if sampled else None)
