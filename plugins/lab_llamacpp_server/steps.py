"""Speculative steps of one request, rebuilt while it streams.

Two sources describe a step. The server's trace log has one ``accepted N/ M
draft tokens`` line per step: the truth for drafted and accepted, equal to
its counters, with the step's end on the server's log clock. The token
stream says how many tokens the step landed and when its first one left the
server. A step is emitted as soon as both halves are in, from whichever
thread completes it (the log reader or the stream reader), so a server lane
moves step by step like an in-process one.

The server's draft time is only logged once the request is over (its
cumulative draft milliseconds and draft calls), so a live step carries no
draft or verify seconds: its clocks say so, and the request's derived split
goes to the engine report instead (see :mod:`lab_llamacpp_server.crosscheck`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from lab.base.events import Cell, Clock, Emit, StepClocks, StepEvent
from lab_llamacpp_server.logparse import AcceptedLine
from lab_llamacpp_server.stream import Chunk, StepTracker, StreamStep


def live_clocks(step: Clock) -> StepClocks:
    """A live step's clocks: its seconds from the server, no draft or verify
    figure (not known until the request ends)."""
    return StepClocks(draft=Clock.NONE, verify=Clock.NONE, step=step)


@dataclass(frozen=True)
class LoggedStep:
    """One step as the log tells it."""

    drafted: int
    accepted: int
    end_us: int | None  # the server's log clock when the step was verified


class LoggedSteps:
    """``accepted`` lines folded into steps. When the target's context cannot
    drop rejected tokens, the server logs a restore-checkpoint line, rolls
    back and verifies the accepted part again, logging a second line: the two
    are one step, the first holds its counts and the second ends it."""

    def __init__(self) -> None:
        self.steps: list[LoggedStep] = []
        self._restore: AcceptedLine | None = None

    def add(self, line: AcceptedLine) -> None:
        if self._restore is not None:
            first, self._restore = self._restore, None
            self.steps.append(LoggedStep(first.drafted, first.accepted, line.t_us))
        elif line.restore:
            self._restore = line
        else:
            self.steps.append(LoggedStep(line.drafted, line.accepted, line.t_us))

    def close(self) -> None:
        """The request is over: a restore line with no replay after it is a
        step of its own."""
        if self._restore is not None:
            line, self._restore = self._restore, None
            self.steps.append(LoggedStep(line.drafted, line.accepted, line.t_us))


def step_seconds(stream: StreamStep | None, end_us: int | None, prev_end_us: int | None) -> tuple[float, Clock]:
    """A step's seconds and the clock they come from, best first.

    Between two steps the log clock spans exactly one step (verify line to
    verify line). The first step of a request, and a step after plain tokens,
    has no start mark in the log; the server's generation clock in the stream
    spans it instead, and the lab's arrival clock when the stream had none.
    """
    if stream is not None and stream.after_step and prev_end_us is not None and end_us is not None:
        return (end_us - prev_end_us) / 1e6, Clock.SERVER_LOG
    if stream is not None and stream.first_server_ms is not None and stream.prev_server_ms is not None:
        return max(stream.first_server_ms - stream.prev_server_ms, 0.0) / 1000.0, Clock.SERVER_TIMINGS
    if stream is not None:
        return max(stream.first_t - stream.prev_t, 0.0), Clock.CLIENT
    return 0.0, Clock.UNKNOWN


class LiveSteps:
    """Joins the log's steps and the stream's steps of one request, in order,
    and emits each StepEvent (``index`` from 0 in the cell) once both halves
    are complete. Thread-safe: the log reader and the stream reader both feed
    it; events are emitted under its lock, so in order and once."""

    def __init__(self, cell: Cell, emit: Emit, tracker: StepTracker) -> None:
        self.cell = cell
        self._emit = emit
        self.tracker = tracker
        self.logged = LoggedSteps()
        self.lines: list[AcceptedLine] = []
        self.emitted: list[StepEvent] = []
        self._lock = threading.Lock()
        self._stream_over = False
        self._open = True

    # -- the log reader thread --------------------------------------------------
    def on_accepted(self, line: AcceptedLine) -> None:
        with self._lock:
            if not self._open:
                return
            self.lines.append(line)
            self.logged.add(line)
            self._emit_ready()

    # -- the stream reader thread -------------------------------------------------
    def feed(self, chunk: Chunk) -> bool:
        """Account for a streamed chunk; True when all its tokens were drafted.
        Call :meth:`poll` after the chunk's tokens were emitted."""
        with self._lock:
            return self.tracker.feed(chunk)

    def poll(self) -> None:
        with self._lock:
            self._emit_ready()

    def finish(self) -> list[StepEvent]:
        """The stream ended and the log caught up: emit what is left (a step
        the token budget cut short never completes in the stream) and stop."""
        with self._lock:
            self.logged.close()
            self._stream_over = True
            self._emit_ready()
            self._open = False
            return list(self.emitted)

    def abandon(self) -> None:
        """The request failed or was cancelled: emit nothing more."""
        with self._lock:
            self._open = False

    # -- under the lock ------------------------------------------------------------
    def _emit_ready(self) -> None:
        while self._open and len(self.emitted) < len(self.logged.steps):
            k = len(self.emitted)
            logged = self.logged.steps[k]
            stream = self.tracker.steps[k] if k < len(self.tracker.steps) else None
            if not self._stream_over and (stream is None or not stream.complete):
                return
            prev_end = self.logged.steps[k - 1].end_us if k > 0 else None
            step_s, clock = step_seconds(stream, logged.end_us, prev_end)
            landed = stream.landed if stream is not None else logged.accepted + 1
            event = StepEvent(
                self.cell, k, logged.drafted, logged.accepted, landed,
                None, None, step_s, clocks=live_clocks(clock),
            )
            self.emitted.append(event)
            self._emit(event)
