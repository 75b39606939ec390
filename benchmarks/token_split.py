"""Host clocks around each one-row decode of a lab baseline, inside a real run.

``split_clocks()`` wraps the llama.cpp engine's calls for the length of a
block: the queueing of a one-row decode (``Context.decode`` with
``wait=False``: batch fill and llama_decode's own host work), the wait for it
(``Context.wait``) and the greedy pick after it (host arg-max or the backend
sampler's token). A baseline cell's token then splits into

  launch  llama_decode's host work
  device  the rest of the span from queueing to the wait's end: the device
          computing, with the loop's event flush running beside it
  pick    the greedy pick
  loop    everything else: the generation loop's own Python between a pick
          and the next decode

llama-bench's tg pays launch and device and no pick or loop, so beside it
this says which part a lab token adds. Only the last cell of an arm without
a drafter is kept (a run's measured round comes after its warmup). Inside the
block the lab runs its arms in this process, where the clocks are.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

from benchmarks.common import arms_in_this_process


@dataclass
class Split:
    tokens: int = 0
    launch_s: float = 0.0
    span_s: float = 0.0
    pick_s: float = 0.0

    def per_token_us(self, gen_s: float, decodes: int) -> dict[str, float]:
        """Microseconds per decode of each part; ``gen_s`` over ``decodes``
        is the cell's own clock, the loop part what the clocks left."""
        n = max(self.tokens, 1)
        token = gen_s / max(decodes, 1) * 1e6
        launch, span, pick = self.launch_s / n * 1e6, self.span_s / n * 1e6, self.pick_s / n * 1e6
        return {"token": token, "launch": launch, "device": span - launch, "pick": pick, "loop": token - span - pick}


class SplitClocks:
    def __init__(self) -> None:
        self.cell = Split()
        self.baseline: dict[str, float] | None = None  # the last baseline cell's per-token split
        self.baseline_counts = (0, 0)  # that cell's decodes the clocks saw, and its own count of them
        self._queued_at: float | None = None
        self._waited = False


@contextmanager
def split_clocks() -> Iterator[SplitClocks]:
    from lab_llamacpp import engine, gpu_pick
    from lab_llamacpp.backend import LlamaCppBackend

    clocks = SplitClocks()
    decode, wait, argmax = engine.Context.decode, engine.Context.wait, engine.Context.argmax
    device_pick, generate = gpu_pick.BackendGreedy.pick, LlamaCppBackend.generate
    now = time.perf_counter

    def timed_decode(self: Any, tokens: Any, logits: str = "last", wait: bool = True) -> None:
        if wait or len(tokens) != 1:
            return decode(self, tokens, logits, wait)
        t0 = now()
        decode(self, tokens, logits, wait)
        clocks.cell.launch_s += now() - t0
        clocks._queued_at = t0

    def timed_wait(self: Any) -> None:
        wait(self)
        if clocks._queued_at is not None:
            clocks.cell.span_s += now() - clocks._queued_at
            clocks.cell.tokens += 1
            clocks._queued_at = None
            clocks._waited = True

    def picked(pick: Any) -> Any:
        def timed(self: Any, *args: Any) -> int:
            if not clocks._waited:
                return int(pick(self, *args))
            t0 = now()
            try:
                return int(pick(self, *args))
            finally:
                clocks.cell.pick_s += now() - t0
                clocks._waited = False
        return timed

    def timed_generate(self: Any, request: Any, emit: Any, cancelled: Any) -> Any:
        clocks.cell = Split()
        gen = generate(self, request, emit, cancelled)
        if self.drafter is None and len(gen.ids) > 1:
            clocks.baseline = clocks.cell.per_token_us(gen.gen_s, len(gen.ids) - 1)
            clocks.baseline_counts = (clocks.cell.tokens, len(gen.ids) - 1)
        return gen

    # the clocks are patched into this process: an arm in a process of its own would run unclocked
    here = arms_in_this_process()
    here.__enter__()
    engine.Context.decode = timed_decode  # type: ignore[method-assign,assignment]
    engine.Context.wait = timed_wait  # type: ignore[method-assign]
    engine.Context.argmax = picked(argmax)  # type: ignore[method-assign]
    gpu_pick.BackendGreedy.pick = picked(device_pick)  # type: ignore[method-assign]
    LlamaCppBackend.generate = timed_generate  # type: ignore[method-assign]
    try:
        yield clocks
    finally:
        engine.Context.decode, engine.Context.wait, engine.Context.argmax = decode, wait, argmax  # type: ignore[method-assign]
        gpu_pick.BackendGreedy.pick = device_pick  # type: ignore[method-assign]
        LlamaCppBackend.generate = generate  # type: ignore[method-assign]
        here.__exit__(None, None, None)
