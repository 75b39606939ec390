"""On an Overlapping target (lab.kit.speculative.Overlapping) the loops send the
events of what landed while the engine runs the next decode: the order of
the work, the output, the events and the loop's clocks, baseline and
speculative, on a scripted target and on real llama.cpp (SmolLM2 weights,
the CPU backend)."""

from __future__ import annotations

import time
from typing import Any, Sequence, cast

import numpy as np
import pytest

from lab.api import Cancelled, Draft, Drafter, DrafterContext, GenerationRequest
from lab.base.events import Cell, Event, StepEvent, TokenEvent
from lab.kit.speculative import LoopStats, Overlapping, TraceStep, generate

VOCAB = 97


def truth(ctx: Sequence[int]) -> int:
    return (sum(ctx[-3:]) * 31 + len(ctx)) % VOCAB


class Scripted:
    """A deterministic target that logs every call; a queued decode runs at
    wait() (or at the first read), as a GPU's would, taking ``busy_s``."""

    def __init__(self, log: list[str], n_ctx: int = 512, busy_s: float = 0.0) -> None:
        self.log = log
        self.n_ctx = n_ctx
        self.n_vocab = VOCAB
        self.busy_s = busy_s
        self.kv: list[int] = []
        self.rows: list[int] = []
        self.in_flight: tuple[int, bool] | None = None

    @property
    def n_past(self) -> int:
        return len(self.kv)

    def reset(self) -> None:
        self.kv = []

    def _rows(self, start: int, all_logits: bool) -> list[int]:
        ends = range(start + 1, len(self.kv) + 1) if all_logits else [len(self.kv)]
        return [truth(self.kv[:e]) for e in ends]

    def decode(self, ids: Sequence[int], all_logits: bool) -> None:
        self.log.append(f"decode {list(ids)}")
        start = len(self.kv)
        self.kv.extend(ids)
        self.rows = self._rows(start, all_logits)

    def pick(self, row: int) -> int:
        assert self.in_flight is None, "pick read the logits before the decode finished"
        self.log.append("pick")
        return self.rows[row]

    def probs(self, row: int) -> np.ndarray:
        raise AssertionError("greedy cells need no probabilities")

    def truncate(self, n_keep: int) -> None:
        del self.kv[n_keep:]

    def piece(self, token: int) -> bytes:
        return f"<{token}>".encode()


class ScriptedOverlapping(Scripted):
    def submit(self, ids: Sequence[int], all_logits: bool) -> None:
        assert self.in_flight is None, "a decode was queued over another"
        self.log.append(f"submit {list(ids)}")
        self.in_flight = (len(self.kv), all_logits)
        self.kv.extend(ids)
        self.t_submit = time.perf_counter()
        self.queued_rows = self._rows(*self.in_flight)

    def wait(self) -> None:
        self.log.append("wait")
        if self.in_flight is not None:
            # the engine works from the submit on, whatever the host did since
            left = self.busy_s - (time.perf_counter() - self.t_submit)
            if left > 0:
                time.sleep(left)
            self.rows = self.queued_rows
            self.in_flight = None


class EveryThird(Drafter):
    """Drafts the true continuation with every third drafted position wrong."""

    name = "every-third"

    def draft(self, context: Sequence[int], k: int) -> Draft:
        ctx = list(context)
        out = []
        for i in range(k):
            tok = truth(ctx)
            if (len(ctx) + i) % 3 == 0:
                tok = (tok + 1) % VOCAB
            out.append(tok)
            ctx.append(tok)
        return Draft(tuple(out))


def run(target: Any, max_tokens: int = 12, emit: Any = None, trace: list[TraceStep] | None = None,
        cancel_after: int | None = None, drafter: Drafter | None = None, n_max: int | None = None,
        asked: Any = None) -> tuple[Any, list[Event], LoopStats]:
    events: list[Event] = []

    def listen(event: Event) -> None:
        events.append(event)
        if isinstance(event, TokenEvent):
            target.log.append(f"token {list(event.ids)}")
        elif isinstance(event, StepEvent):
            target.log.append(f"step {event.index}")
        if emit is not None:
            emit(event)

    req = GenerationRequest(cell=Cell("arm", "p", 1), prompt="", system=None, chat_template=False,
                            max_tokens=max_tokens, temperature=0.0, seed=0, ignore_eos=True, n_max=n_max)
    stats = LoopStats()

    def cancelled() -> bool:
        if asked is not None:
            asked(events)
        return cancel_after is not None and sum(isinstance(e, TokenEvent) for e in events) >= cancel_after

    gen = generate(target, [3, 14, 15], req, listen, cancelled, drafter=drafter, stats=stats, trace=trace)
    return gen, events, stats


def tokens(events: list[Event]) -> list[TokenEvent]:
    return [e for e in events if isinstance(e, TokenEvent)]


def speculative(target: Any, **kw: Any) -> tuple[Any, list[Event], LoopStats]:
    drafter = EveryThird({}, cast(DrafterContext, None))  # it reads nothing of its context
    return run(target, drafter=drafter, n_max=4, **kw)


def test_only_targets_with_submit_and_wait_overlap() -> None:
    assert isinstance(ScriptedOverlapping([]), Overlapping)
    assert not isinstance(Scripted([]), Overlapping)


def test_each_token_is_sent_while_the_next_decode_is_in_flight() -> None:
    log: list[str] = []
    gen, events, stats = run(ScriptedOverlapping(log))
    assert len(gen.ids) == 12
    sent = [i for i, line in enumerate(log) if line.startswith("token")]
    assert [log[i] for i in sent] == [f"token [{t}]" for t in gen.ids]
    # every token but the last is sent between the submit of the decode it
    # feeds and the wait for that decode
    for i, tok in zip(sent[:-1], gen.ids[:-1]):
        assert log[i - 1] == f"submit [{tok}]" and log[i + 1] == "wait", log[i - 2 : i + 2]
    # the last one after its pick, with nothing left queued
    assert log[-2:] == ["pick", f"token [{gen.ids[-1]}]"]
    assert stats.plain_tokens == 11


def test_a_step_is_sent_while_the_next_verify_is_in_flight() -> None:
    log: list[str] = []
    gen, events, stats = speculative(ScriptedOverlapping(log), max_tokens=40)
    assert stats.steps >= 5
    submits = [i for i, line in enumerate(log) if line.startswith("submit")]
    for index in range(stats.steps - 1):
        at = log.index(f"step {index}")
        # sent after the next pass was queued and before the loop waited for it
        before = max(i for i in submits if i < at)
        assert all(line.startswith(("token", "step")) for line in log[before + 1 : at])
        after = next(line for line in log[at + 1 :] if not line.startswith(("token", "step")))
        assert after == "wait"
    assert log[-1].startswith(("token", "step"))


@pytest.mark.parametrize("kind", ["baseline", "speculative"])
def test_overlapping_gives_the_plain_loops_output_events_and_trace(kind: str) -> None:
    go = run if kind == "baseline" else speculative
    plain_trace: list[TraceStep] = []
    over_trace: list[TraceStep] = []
    plain, plain_events, _ = go(Scripted([]), max_tokens=30, trace=plain_trace)
    over, over_events, _ = go(ScriptedOverlapping([]), max_tokens=30, trace=over_trace)
    assert over.ids == plain.ids and over.text == plain.text
    # the same events in the same order, each stamped when it was made
    def shape(events: list[Event]) -> list[tuple[Any, ...]]:
        return [(type(e).__name__, getattr(e, "ids", None), getattr(e, "text", None), getattr(e, "from_draft", None),
                 getattr(e, "index", None), getattr(e, "drafted", None), getattr(e, "accepted", None)) for e in events]

    assert shape(over_events) == shape(plain_events)
    assert over_trace == plain_trace
    for key in ("plain_tokens", "loop_steps"):
        assert over.engine_report[key] == plain.engine_report[key]
    if kind == "speculative":
        assert 0 < sum(e.accepted for e in over_events if isinstance(e, StepEvent)) < sum(
            e.drafted for e in over_events if isinstance(e, StepEvent))


@pytest.mark.parametrize("max_tokens", [1, 2, 3])
def test_short_cells_send_every_token_once(max_tokens: int) -> None:
    gen, events, _ = run(ScriptedOverlapping([]), max_tokens=max_tokens)
    plain, _, _ = run(Scripted([]), max_tokens=max_tokens)
    assert gen.ids == plain.ids
    assert [i for e in tokens(events) for i in e.ids] == gen.ids
    assert len(gen.ids) == max_tokens


@pytest.mark.alone
def test_sending_while_the_engine_idles_is_the_loops_time() -> None:
    """A listener that takes 2 ms an event, an engine that is done at once:
    the sending held the loop up, and counts as its own time, not the
    engine's. The loop can only tell an idle engine by how long its wait
    took (``BUSY_WAIT_S``): on a busy host a wait can overshoot that and
    read one pass's sending as the engine's, so two of the ten may go that
    way; a loop that never charged the sending would keep none."""

    def slow(event: Event) -> None:
        time.sleep(0.002)

    gen, _, stats = run(ScriptedOverlapping([]), max_tokens=11, emit=slow)
    assert stats.engine_s < 10 * 0.002
    assert stats.overhead_s() >= 8 * 0.002


@pytest.mark.alone
@pytest.mark.parametrize("kind", ["baseline", "speculative"])
def test_sending_while_the_engine_works_is_the_engines_time(kind: str) -> None:
    """An engine busy 6 ms a pass, a listener that takes 1 ms an event: the
    sending is hidden under the engine, whose clock keeps the whole pass,
    and the steps' verify times are the engine's 6 ms, not 6 minus the
    listeners' share."""
    go = run if kind == "baseline" else speculative

    def slow(event: Event) -> None:
        time.sleep(0.001)

    gen, events, stats = go(ScriptedOverlapping([], busy_s=0.006), max_tokens=13, emit=slow)
    passes = stats.plain_tokens + stats.steps
    assert stats.engine_s >= passes * 0.006
    assert stats.overhead_s() < passes * 0.001
    for e in events:
        if isinstance(e, StepEvent):
            assert e.verify_s >= 0.006


def test_every_event_keeps_the_time_it_was_made() -> None:
    """Events go out one decode later, stamped when their tokens were picked
    (and a step when it ended), so TTFT and inter-token latencies stay the
    engine's."""

    class SlowQueue(ScriptedOverlapping):
        def submit(self, ids: Sequence[int], all_logits: bool) -> None:
            super().submit(ids, all_logits)
            time.sleep(0.003)  # a launch that takes 3 ms of the host's time

    picked: list[float] = []
    target = SlowQueue([])
    plain_pick = target.pick

    def pick(row: int) -> int:
        tok = plain_pick(row)
        picked.append(time.perf_counter())
        return tok

    target.pick = pick  # type: ignore[method-assign]
    gen, events, _ = run(target, max_tokens=6)
    assert len(tokens(events)) == 6 == len(picked)
    for event, at in zip(tokens(events), picked):
        assert 0 <= event.t - at < 0.002, (event.t, at)


HOLD_S = 0.2


@pytest.mark.parametrize("kind", ["baseline", "speculative"])
def test_a_pause_sees_every_landed_event_and_is_in_no_clock(kind: str) -> None:
    """``cancelled`` holds the loop while a run is paused: by then every
    token that landed has been sent, and the 200 ms it held count in no
    clock of the loop (the engine's, a step's, the loop's own). The hold
    is several times the run's own engine time (some 20-30 ms on a busy
    machine, its sleeps overshooting), so a hold counted shows whatever
    the load."""
    go = run if kind == "baseline" else speculative
    target = ScriptedOverlapping([])
    asks = []

    def asked(events: list[Event]) -> None:
        assert target.in_flight is not None, "asked outside an engine pass"
        sent = [i for e in tokens(events) for i in e.ids]
        assert sent == target.kv[3 : target.in_flight[0] + 1]
        asks.append(len(sent))
        if len(asks) == 3:
            time.sleep(HOLD_S)

    gen, events, stats = go(target, max_tokens=30, asked=asked)
    assert len(asks) == stats.plain_tokens + stats.steps
    assert stats.engine_s < HOLD_S and stats.loop_s < HOLD_S
    assert all(e.step_s < HOLD_S and (e.verify_s or 0) < HOLD_S for e in events if isinstance(e, StepEvent))


def test_a_listener_that_raises_leaves_no_decode_in_flight() -> None:
    target = ScriptedOverlapping([])
    seen = []

    def boom(event: Event) -> None:
        seen.append(event)
        if len(seen) == 4:
            raise RuntimeError("listener failed")

    with pytest.raises(RuntimeError, match="listener failed"):
        run(target, emit=boom)
    assert target.in_flight is None
    assert target.log[-1] == "wait"


def test_cancel_sends_what_landed_and_stops_between_decodes() -> None:
    target = ScriptedOverlapping([])
    events: list[Event] = []
    with pytest.raises(Cancelled):
        run(target, max_tokens=50, cancel_after=5, emit=events.append)
    assert target.in_flight is None
    # every token that landed before the cancel was sent
    sent = [i for e in tokens(events) for i in e.ids]
    plain, _, _ = run(Scripted([]), max_tokens=50)
    assert len(sent) >= 5 and sent == plain.ids[: len(sent)]


# -- real llama.cpp -------------------------------------------------------------


class PlainOnly:
    """A LlamaTarget seen through the Target protocol alone (no submit)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.n_ctx = inner.n_ctx
        self.n_vocab = inner.n_vocab

    @property
    def n_past(self) -> int:
        return int(self.inner.n_past)

    def __getattr__(self, name: str) -> Any:
        if name in ("submit", "wait"):
            raise AttributeError(name)
        return getattr(self.inner, name)


class Replay(Drafter):
    """Drafts a known output with every fourth drafted position wrong."""

    name = "replay"

    def __init__(self, prompt: int, reference: list[int]) -> None:
        self.prompt = prompt
        self.reference = reference

    def draft(self, context: Sequence[int], k: int) -> Draft:
        at = len(context) - self.prompt
        out = list(self.reference[at : at + k])
        for i in range(len(out)):
            if (at + i) % 4 == 3:
                out[i] = (out[i] + 1) % 1000
        return Draft(tuple(out))


@pytest.mark.engine
def test_llama_overlapped_equals_the_synchronous_loop() -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[llamacpp]')")
    from lab_llamacpp import engine
    from lab_llamacpp.target import LlamaTarget

    from lab.kit import models

    model = engine.Model(str(models.resolve("embedded:smollm2")))
    ctx = engine.Context(model, 512, 64, 2)
    try:
        target = LlamaTarget(ctx, 0.0, ignore_eos=True)
        assert isinstance(target, Overlapping)
        assert not isinstance(PlainOnly(target), Overlapping)
        prompt = model.tokenize("The lighthouse keeper climbed the stairs and")

        def go(t: Any, drafter: Drafter | None) -> tuple[Any, list[Event]]:
            req = GenerationRequest(cell=Cell("arm", "p", 1), prompt="", system=None, chat_template=False,
                                    max_tokens=40, temperature=0.0, seed=0, ignore_eos=True,
                                    n_max=4 if drafter is not None else None)
            events: list[Event] = []
            return generate(t, prompt, req, events.append, lambda: False, drafter=drafter), events

        def shape(events: list[Event]) -> list[tuple[Any, ...]]:
            return [(type(e).__name__, getattr(e, "ids", None), getattr(e, "from_draft", None),
                     getattr(e, "drafted", None), getattr(e, "accepted", None)) for e in events]

        over, over_events = go(target, None)
        plain, plain_events = go(PlainOnly(target), None)
        assert over.ids == plain.ids and len(over.ids) == 40
        assert over.text == plain.text
        assert shape(over_events) == shape(plain_events)

        # speculative: the same verify passes, picks and events, and the
        # greedy output is the baseline's
        spec_over, spec_over_events = go(target, Replay(len(prompt), over.ids))
        spec_plain, spec_plain_events = go(PlainOnly(target), Replay(len(prompt), over.ids))
        assert spec_over.ids == spec_plain.ids == over.ids
        assert shape(spec_over_events) == shape(spec_plain_events)
        steps = [e for e in spec_over_events if isinstance(e, StepEvent)]
        assert steps and 0 < sum(e.accepted for e in steps) < sum(e.drafted for e in steps)

        # a queued decode reads back the synchronous decode's logits
        target.reset()
        target.decode(prompt, all_logits=False)
        target.submit([over.ids[0], over.ids[1]], all_logits=True)
        queued = [ctx.logits(0), ctx.logits(1)]
        target.reset()
        target.decode(prompt, all_logits=False)
        target.decode([over.ids[0], over.ids[1]], all_logits=True)
        assert all(np.array_equal(q, ctx.logits(i)) for i, q in enumerate(queued))
    finally:
        ctx.close()
        model.close()
