"""Speculative steps from the token stream alone, where there is no log of
ours to read (an attached server, or several requests in flight): the
stream's running ``draft_n`` / ``draft_n_accepted`` counters mark each step,
timed on the server's generation clock in the same chunks."""

from __future__ import annotations

import threading

from lab.base.events import Cell, Clock, Emit, StepEvent
from lab_llamacpp_server.steps import live_clocks
from lab_llamacpp_server.stream import Chunk, StepTracker, StreamStep


def stream_step_seconds(step: StreamStep) -> tuple[float, Clock]:
    """From the end of the work before it to its first token: the server's
    clock when the stream carries it, else the lab's arrival clock."""
    if step.first_server_ms is not None and step.prev_server_ms is not None:
        return max(step.first_server_ms - step.prev_server_ms, 0.0) / 1000.0, Clock.SERVER_TIMINGS
    return max(step.first_t - step.prev_t, 0.0), Clock.CLIENT


class StreamSteps:
    """Emits a StepEvent per step the stream shows, in order, once its
    tokens are in (or the stream ended). Same surface as
    :class:`lab_llamacpp_server.steps.LiveSteps` for the stream side."""

    def __init__(self, cell: Cell, emit: Emit | None, tracker: StepTracker) -> None:
        self.cell = cell
        self._emit = emit
        self.tracker = tracker
        self.emitted: list[StepEvent] = []
        self._lock = threading.Lock()
        self._open = True

    def feed(self, chunk: Chunk) -> bool:
        with self._lock:
            return self.tracker.feed(chunk)

    def poll(self) -> None:
        with self._lock:
            self._emit_ready(stream_over=False)

    def finish(self) -> list[StepEvent]:
        with self._lock:
            self._emit_ready(stream_over=True)
            self._open = False
            return list(self.emitted)

    def abandon(self) -> None:
        with self._lock:
            self._open = False

    def _emit_ready(self, stream_over: bool) -> None:
        while self._open and len(self.emitted) < len(self.tracker.steps):
            k = len(self.emitted)
            step = self.tracker.steps[k]
            if not stream_over and not step.complete:
                return
            step_s, clock = stream_step_seconds(step)
            event = StepEvent(
                self.cell, k, step.drafted, step.accepted, step.landed,
                None, None, step_s, clocks=live_clocks(clock),
            )
            self.emitted.append(event)
            if self._emit is not None:
                self._emit(event)
