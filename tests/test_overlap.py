"""A baseline on an Overlapping target lands each token while the engine
decodes the next (lab.speculative.Overlapping): the order of the work, the
output, the events and the loop's clocks, on a scripted target and on real
llama.cpp (SmolLM2 weights, the CPU backend)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pytest

from lab.api import Cancelled, GenerationRequest
from lab.events import Cell, Event, TokenEvent
from lab.speculative import LoopStats, Overlapping, TraceStep, generate

VOCAB = 97


class Scripted:
    """A deterministic target that logs every call; ``queued`` decodes run
    at wait() (or at the first read), as a GPU's would."""

    def __init__(self, log: list[str], n_ctx: int = 512) -> None:
        self.log = log
        self.n_ctx = n_ctx
        self.n_vocab = VOCAB
        self.kv: list[int] = []
        self.rows: list[int] = []
        self.in_flight = False

    @property
    def n_past(self) -> int:
        return len(self.kv)

    def reset(self) -> None:
        self.kv = []

    def _compute(self) -> None:
        self.rows = [(sum(self.kv[-3:]) * 31 + len(self.kv)) % VOCAB]

    def decode(self, ids: Sequence[int], all_logits: bool) -> None:
        self.log.append(f"decode {list(ids)}")
        self.kv.extend(ids)
        self._compute()

    def pick(self, row: int) -> int:
        assert not self.in_flight, "pick read the logits before the decode finished"
        self.log.append("pick")
        return self.rows[row]

    def probs(self, row: int) -> np.ndarray:
        raise AssertionError("greedy cells need no probabilities")

    def truncate(self, n_keep: int) -> None:
        del self.kv[n_keep:]

    def piece(self, token: int) -> bytes:
        return f"<{token}>".encode()


class ScriptedOverlapping(Scripted):
    def submit(self, ids: Sequence[int]) -> None:
        assert not self.in_flight, "a decode was queued over another"
        self.log.append(f"submit {list(ids)}")
        self.kv.extend(ids)
        self.in_flight = True

    def wait(self) -> None:
        self.log.append("wait")
        if self.in_flight:
            self._compute()
            self.in_flight = False


def baseline(target: Any, max_tokens: int = 12, emit: Any = None, trace: list[TraceStep] | None = None,
             cancel_after: int | None = None) -> tuple[Any, list[TokenEvent], LoopStats]:
    events: list[TokenEvent] = []

    def listen(event: Event) -> None:
        if isinstance(event, TokenEvent):
            events.append(event)
            target.log.append(f"token {list(event.ids)}")
            if emit is not None:
                emit(event)

    req = GenerationRequest(cell=Cell("base", "p", 1), prompt="", system=None, chat_template=False,
                            max_tokens=max_tokens, temperature=0.0, seed=0, ignore_eos=True, n_max=None)
    stats = LoopStats()
    cancelled = (lambda: len(events) >= cancel_after) if cancel_after is not None else (lambda: False)
    gen = generate(target, [3, 14, 15], req, listen, cancelled, stats=stats, trace=trace)
    return gen, events, stats


def test_only_targets_with_submit_and_wait_overlap() -> None:
    assert isinstance(ScriptedOverlapping([]), Overlapping)
    assert not isinstance(Scripted([]), Overlapping)


def test_each_token_lands_while_the_next_decode_is_in_flight() -> None:
    log: list[str] = []
    gen, events, stats = baseline(ScriptedOverlapping(log))
    assert len(gen.ids) == 12
    landed = [i for i, line in enumerate(log) if line.startswith("token")]
    assert [log[i] for i in landed] == [f"token [{t}]" for t in gen.ids]
    # the first token lands before any decode of the generation phase (TTFT)
    assert landed[0] < min(i for i, line in enumerate(log) if line.startswith("submit"))
    # every later token but the last lands between the submit of the decode
    # that follows it (whose input it is) and the wait for that decode
    for i, tok in zip(landed[1:-1], gen.ids[1:-1]):
        assert log[i - 1] == f"submit [{tok}]" and log[i + 1] == "wait", log[i - 2 : i + 2]
    # the last lands right after its pick, with nothing left queued
    assert log[-2:] == ["pick", f"token [{gen.ids[-1]}]"]
    assert stats.plain_tokens == 11


def test_overlapping_gives_the_plain_loops_output_events_and_trace() -> None:
    plain_trace: list[TraceStep] = []
    over_trace: list[TraceStep] = []
    plain, plain_events, _ = baseline(Scripted([]), max_tokens=20, trace=plain_trace)
    over, over_events, _ = baseline(ScriptedOverlapping([]), max_tokens=20, trace=over_trace)
    assert over.ids == plain.ids and over.text == plain.text
    assert [e.ids for e in over_events] == [e.ids for e in plain_events]
    assert [e.text for e in over_events] == [e.text for e in plain_events]
    assert over_trace == plain_trace
    assert over.engine_report["plain_tokens"] == plain.engine_report["plain_tokens"] == 19


@pytest.mark.parametrize("max_tokens", [1, 2, 3])
def test_short_cells_land_every_token_once(max_tokens: int) -> None:
    gen, events, _ = baseline(ScriptedOverlapping([]), max_tokens=max_tokens)
    plain, _, _ = baseline(Scripted([]), max_tokens=max_tokens)
    assert gen.ids == plain.ids
    assert [i for e in events for i in e.ids] == gen.ids
    assert len(gen.ids) == max_tokens


def test_landing_time_is_not_engine_time() -> None:
    """A listener that takes 2 ms a token: on an overlapping target that
    time happens while the decode is queued, and the loop counts it as its
    own (host) time, not the engine's."""
    import time

    def slow(event: Event) -> None:
        time.sleep(0.002)

    gen, _, stats = baseline(ScriptedOverlapping([]), max_tokens=11, emit=slow)
    # ten decodes, nine of them with a landing inside their window
    assert stats.engine_s < 9 * 0.002
    assert stats.overhead_s() >= 9 * 0.002


def test_a_listener_that_raises_leaves_no_decode_in_flight() -> None:
    target = ScriptedOverlapping([])
    seen = []

    def boom(event: Event) -> None:
        seen.append(event)
        if len(seen) == 4:
            raise RuntimeError("listener failed")

    with pytest.raises(RuntimeError, match="listener failed"):
        baseline(target, emit=boom)
    assert not target.in_flight
    assert target.log[-1] == "wait"


def test_cancel_stops_between_decodes() -> None:
    target = ScriptedOverlapping([])
    with pytest.raises(Cancelled):
        baseline(target, max_tokens=50, cancel_after=5)
    assert not target.in_flight


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


@pytest.mark.engine
def test_llama_baseline_overlapped_equals_the_synchronous_loop() -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[llamacpp]')")
    from lab_llamacpp import engine
    from lab_llamacpp.backend import LlamaTarget

    from lab import models

    model = engine.Model(str(models.resolve("embedded:smollm2")))
    ctx = engine.Context(model, 512, 64, 2)
    try:
        target = LlamaTarget(ctx, 0.0, ignore_eos=True)
        assert isinstance(target, Overlapping)
        assert not isinstance(PlainOnly(target), Overlapping)
        prompt = model.tokenize("The lighthouse keeper climbed the stairs and")
        req = GenerationRequest(cell=Cell("base", "p", 1), prompt="", system=None, chat_template=False,
                                max_tokens=40, temperature=0.0, seed=0, ignore_eos=True, n_max=None)
        runs = []
        for t in (target, PlainOnly(target)):
            events: list[Event] = []
            gen = generate(t, prompt, req, events.append, lambda: False)
            runs.append((gen, [e for e in events if isinstance(e, TokenEvent)]))
        (over, over_events), (plain, plain_events) = runs
        assert over.ids == plain.ids and len(over.ids) == 40
        assert over.text == plain.text
        assert [e.ids for e in over_events] == [e.ids for e in plain_events]

        # a queued decode reads back the synchronous decode's logits
        target.reset()
        target.decode(prompt, all_logits=False)
        target.submit([over.ids[0]])
        queued = ctx.logits(-1)
        target.reset()
        target.decode(prompt, all_logits=False)
        target.decode([over.ids[0]], all_logits=False)
        assert np.array_equal(queued, ctx.logits(-1))
    finally:
        ctx.close()
        model.close()


def test_a_held_token_carries_the_time_it_was_picked() -> None:
    """The event of a token landed while the next decode ran is stamped
    when the token was picked, so inter-token latencies stay the engine's."""
    import time

    class SlowQueue(ScriptedOverlapping):
        def submit(self, ids: Sequence[int]) -> None:
            super().submit(ids)
            time.sleep(0.003)  # a launch that takes 3 ms of the host's time

    log: list[str] = []
    picked: list[float] = []
    target = SlowQueue(log)
    plain_pick = target.pick

    def pick(row: int) -> int:
        tok = plain_pick(row)
        picked.append(time.perf_counter())
        return tok

    target.pick = pick  # type: ignore[method-assign]
    gen, events, _ = baseline(target, max_tokens=6)
    assert len(events) == 6 == len(picked)
    for event, at in zip(events, picked):
        assert 0 <= event.t - at < 0.002, (event.t, at)
