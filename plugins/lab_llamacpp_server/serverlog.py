"""The server's log as it arrives, on the process's reader thread: facts of
the load (buffers, out-of-memory, a failed speculative setup) and of the
request in flight, its step lines passed straight on to the live steps."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable

from lab_llamacpp_server import logparse

_SPEC_SETUP_FAILED = ("failed to initialize speculative decoding", "speculative decoding not supported")


@dataclass
class RequestLog:
    """Log facts of one request, filled by the reader thread."""

    on_accepted: Callable[[logparse.AcceptedLine], None] | None = None
    stats: dict[str, logparse.ImplStats] = field(default_factory=dict)
    summary: logparse.RequestSummary | None = None
    acc_per_pos: list[float] | None = None
    eval_ms: float | None = None
    ended: threading.Event = field(default_factory=threading.Event)
    stats_seen: threading.Event = field(default_factory=threading.Event)
    oom_lines: list[str] = field(default_factory=list)
    # the server's task id for this request, from its first slot line
    task_id: int | None = None
    released: threading.Event = field(default_factory=threading.Event)


class ServerLog:
    """Routes every log line of one server; ``on_line`` is the process's
    line callback."""

    def __init__(self) -> None:
        self.buffers: dict[str, int] = {"target": 0, "draft": 0}
        self._buffer_phase = "target"
        self.load_oom: list[str] = []
        self.spec_failed: list[str] = []
        self._req: RequestLog | None = None
        self._lock = threading.Lock()

    def begin(self, on_accepted: Callable[[logparse.AcceptedLine], None] | None = None) -> RequestLog:
        """A request starts: its lines go to a fresh RequestLog."""
        req = RequestLog(on_accepted=on_accepted)
        with self._lock:
            self._req = req
        return req

    def end(self) -> None:
        with self._lock:
            self._req = None

    def oom_lines(self) -> list[str]:
        """Out-of-memory lines of the request in flight."""
        with self._lock:
            return list(self._req.oom_lines) if self._req else []

    @property
    def engine_bytes(self) -> int:
        """What the server reported of its buffers (weights as mapped, KV,
        compute): not fooled by weight pages the OS evicted, unlike RSS."""
        return self.buffers["target"] + self.buffers["draft"]

    def on_line(self, raw: str) -> None:
        line = logparse.split_line(raw)
        if logparse.starts_draft_phase(line):
            self._buffer_phase = "draft"
        buf = logparse.parse_buffer(line)
        if buf is not None:
            self.buffers[self._buffer_phase] += buf[2]
        if any(s in line.text for s in _SPEC_SETUP_FAILED):
            self.spec_failed.append(line.text)
        with self._lock:
            req = self._req
        if req is None:
            if line.level == "E" and logparse.is_oom(line.text):
                self.load_oom.append(raw)
            return
        self._request_line(req, raw, line)

    @staticmethod
    def _request_line(req: RequestLog, raw: str, line: logparse.LogLine) -> None:
        if logparse.is_oom(line.text) and line.level in ("E", "W", ""):
            req.oom_lines.append(raw)
        owner = logparse.slot_task(line)
        if owner is not None and owner[1] >= 0:
            if req.task_id is None:
                req.task_id = owner[1]
            if owner[1] == req.task_id and logparse.is_released(line):
                req.released.set()
                return
        acc = logparse.parse_accepted(line)
        if acc is not None:
            if req.on_accepted is not None:
                req.on_accepted(acc)
            return
        stats = logparse.parse_stats(line)
        if stats is not None:
            req.stats[stats.impl] = stats
            req.stats_seen.set()
            return
        summary = logparse.parse_request_acceptance(line)
        if summary is not None:
            req.summary = summary
            return
        per_pos = logparse.parse_acc_per_pos(line)
        if per_pos is not None:
            req.acc_per_pos = per_pos
            return
        ev = logparse.parse_eval_time(line)
        if ev is not None:
            req.eval_ms = ev[0]
            return
        if logparse.is_total_time(line):
            req.ended.set()
