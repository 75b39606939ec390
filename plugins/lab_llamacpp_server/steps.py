"""Speculative steps of one request, rebuilt while it streams: the log's
``accepted N/ M`` line gives drafted, accepted and the step's end, the
stream its landed tokens and arrival; a step is emitted once both halves are
in. Live steps carry no draft time (it is logged after the request)."""

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
    """``accepted`` lines folded into steps: a checkpoint restore logs a
    second line for the re-verify, and the two are one step."""

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
    """A step's seconds and their clock: the log's between two steps, else
    the stream's server clock, else the lab's arrival clock."""
    if stream is not None and stream.after_step and prev_end_us is not None and end_us is not None:
        return (end_us - prev_end_us) / 1e6, Clock.SERVER_LOG
    if stream is not None and stream.first_server_ms is not None and stream.prev_server_ms is not None:
        return max(stream.first_server_ms - stream.prev_server_ms, 0.0) / 1000.0, Clock.SERVER_TIMINGS
    if stream is not None:
        return max(stream.first_t - stream.prev_t, 0.0), Clock.CLIENT
    return 0.0, Clock.UNKNOWN


class LiveSteps:
    """Joins the log's and the stream's steps of one request and emits each
    StepEvent once, in order, under its lock (both reader threads feed it)."""

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

    def on_accepted(self, line: AcceptedLine) -> None:
        with self._lock:
            if not self._open:
                return
            self.lines.append(line)
            self.logged.add(line)
            self._emit_ready()

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
