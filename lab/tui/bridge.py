"""From runner events (runner thread) to Textual messages (UI thread).

:class:`EventBridge` batches token text and steps per cell and a flusher
thread posts them at the cadence of cadence.py; every other event flushes
what is pending first, so no cell finishes before its text. The runner's
Held events become PauseChanged messages."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

from textual.message import Message

from lab.base import events, metrics
from lab.base.probe import ProbeReported
from lab.runner import RunControl
from lab.telemetry.gpu import GpuSampled
from lab.tui.cadence import FULL, Cadence
from lab.tui.messages import (
    ArmMetrics,
    ArmMetricsUpdated,
    ArmStatusChanged,
    CellFinished,
    GpuSampledLive,
    PauseChanged,
    ProbeProgress,
    RunBegan,
    RunEnded,
    TokensLanded,
)


@dataclass
class _Live:
    """What the bridge knows about one arm's current cell."""

    arm: str
    prompt: str = ""
    round: int = -1
    tokens: int = 0
    first_t: float | None = None
    first_tokens: int = 0
    last_t: float | None = None
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    landed: int = 0
    last_draft_ms: float | None = None
    last_verify_ms: float | None = None
    mem_bytes: int | None = None
    peak_mem_bytes: int | None = None
    started_t: float | None = None  # the cell's RUNNING/WARMUP status
    ttft_s: float | None = None
    segments: list[tuple[str, bool]] = field(default_factory=list)
    batch_chars: int = 0  # characters in ``segments``
    marks: list[tuple[int, int]] = field(default_factory=list)  # rejected drafts: (offset into segments, count)
    drafts: events.DraftMarks = field(default_factory=events.DraftMarks)  # the cell's marks, as the store saves them
    step_owed: bool = False  # the last token was the target's own and no step event followed it yet
    pending_steps: list[events.StepEvent] = field(default_factory=list)
    dirty: bool = False
    metrics_dirty: bool = False
    metrics_posted_at: float = float("-inf")

    def start_cell(self, prompt: str, round: int, t: float | None = None) -> None:
        self.prompt, self.round = prompt, round
        self.started_t = t
        self.ttft_s = None
        self.tokens = self.first_tokens = self.steps = self.drafted = self.accepted = self.landed = 0
        self.step_owed = False
        self.drafts = events.DraftMarks()
        self.first_t = self.last_t = None
        self.last_draft_ms = self.last_verify_ms = None
        self.dirty = self.metrics_dirty = True

    def tok_per_s(self) -> float | None:
        # Rate over the tokens after the first batch: the first token lands
        # at the end of prompt processing, which tok/s leaves out.
        if self.first_t is None or self.last_t is None:
            return None
        return metrics.tok_per_s(self.tokens - self.first_tokens, self.last_t - self.first_t)

    def snapshot(self) -> ArmMetrics:
        return ArmMetrics(
            self.arm, self.prompt, self.round, self.tokens, self.tok_per_s(), self.steps,
            self.drafted, self.accepted, self.landed, self.last_draft_ms, self.last_verify_ms,
            self.mem_bytes, self.peak_mem_bytes,
            self.ttft_s,
        )


class EventBridge:
    """A runner listener that posts batched messages with the thread-safe
    ``post`` (such as ``widget.post_message``)."""

    def __init__(
        self, post: Callable[[Message], object], control: RunControl,
        cadence: Cadence = FULL, cadences: Mapping[str, Cadence] | None = None,
    ) -> None:
        """``cadence``: how often text and figures are posted; ``cadences``:
        per arm, the one to switch to when it loads (cadence.py)."""
        self.post = post
        self.control = control
        self.cadence = cadence
        self.cadences = dict(cadences or {})
        self._lock = threading.RLock()
        self._live: dict[str, _Live] = {}
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        self.running_arm: str | None = None

    # -- controls (UI thread) ----------------------------------------------
    @property
    def paused(self) -> bool:
        return self.control.paused

    def pause(self) -> None:
        self.control.pause()
        self.post(PauseChanged(True, False))

    def resume(self) -> None:
        self.control.resume()
        self.post(PauseChanged(False, False))

    def cancel_arm(self, arm: str) -> None:
        """Stop an arm: the running one at its next step; a pending one is
        never loaded (its cells are recorded as cancelled)."""
        with self._lock:
            # Marked cancelled either way, so the running arm's cells read
            # "cancelled" rather than "skipped" once the skip stops it.
            self.control.cancel_arm(arm)
            if arm == self.running_arm:
                self.control.skip_arm()

    def skip_arm(self) -> None:
        self.control.skip_arm()

    def cancel(self) -> None:
        self.control.cancel()  # a hold ends on its own when the run is cancelled

    # -- the listener (runner thread) ------------------------------------------
    def __call__(self, event: events.RunEvent) -> None:
        if isinstance(event, events.TokenEvent):
            with self._lock:
                live = self._arm(event.cell.arm)
                if live.first_t is None:
                    live.first_t = event.t
                    if live.started_t is not None:
                        live.ttft_s = max(0.0, event.t - live.started_t)
                    live.first_tokens = len(event.ids) + live.tokens
                live.tokens += len(event.ids)
                live.last_t = event.t
                live.segments.append((event.text, event.from_draft))
                live.batch_chars += len(event.text)
                live.drafts.token(event)
                live.step_owed = live.steps > 0 and not event.from_draft
                live.dirty = live.metrics_dirty = True
            return
        if isinstance(event, events.StepEvent):
            with self._lock:
                live = self._arm(event.cell.arm)
                live.steps += 1
                live.drafted += event.drafted
                live.accepted += event.accepted
                live.landed += event.landed
                live.last_draft_ms = None if event.draft_s is None else event.draft_s * 1000
                live.last_verify_ms = None if event.verify_s is None else event.verify_s * 1000
                at = live.drafts.step(event)
                if at is not None:
                    # into the pending batch (a mark whose token went out already opens the next)
                    live.marks.append((max(0, at - live.drafts.chars + live.batch_chars),
                                       event.drafted - event.accepted))
                live.step_owed = False
                live.pending_steps.append(event)
                live.dirty = live.metrics_dirty = True
            return
        if isinstance(event, events.MemorySample):
            with self._lock:
                live = self._arm(event.arm)
                live.mem_bytes = event.rss_bytes
                live.peak_mem_bytes = max(live.peak_mem_bytes or 0, event.rss_bytes)
                live.dirty = live.metrics_dirty = True
            return
        if isinstance(event, GpuSampled):
            if event.arm:  # between arms a reading belongs to no lane
                self.post(GpuSampledLive(event))
            return
        if isinstance(event, events.Held):
            with self._lock:
                if event.seconds is not None and event.in_cell:
                    # live tok/s leaves the held time out, as the result does
                    live = self._arm(event.cell.arm)
                    if live.first_t is not None:
                        live.first_t += event.seconds
                self._flush_locked()
            self.post(PauseChanged(self.paused if event.seconds is not None else True, event.seconds is None))
            return
        if isinstance(event, events.RunStarted):
            self._start_flusher()
            self.post(RunBegan(event.run_dir, event.arms, event.prompts, event.rounds))
            return
        if isinstance(event, events.StatusChanged):
            self._on_status(event)
            return
        if isinstance(event, ProbeReported):
            with self._lock:
                self._flush_locked()
                self.post(ProbeProgress(event.stack, event.text, event.done))
            return
        if isinstance(event, events.Finished):
            with self._lock:
                self._flush_locked()
                self.post(CellFinished(event.cell, events.finished_row(event)))
            return
        if isinstance(event, events.RunFinished):
            self._stop.set()
            if self._flusher is not None and self._flusher is not threading.current_thread():
                self._flusher.join(timeout=1)
            with self._lock:
                self._flush_locked()
                self.running_arm = None
                self.post(RunEnded(event.run_dir, event.cancelled))

    def _on_status(self, event: events.StatusChanged) -> None:
        cell = event.cell
        if cell.round < 0 and event.status == events.Status.LOADING:
            with self._lock:
                self.running_arm = cell.arm
                self.cadence = self.cadences.get(cell.arm, self.cadence)
        if cell.round >= 0 and event.status in (events.Status.RUNNING, events.Status.WARMUP):
            with self._lock:
                self._arm(cell.arm).start_cell(cell.prompt, cell.round, event.t)
        with self._lock:
            self._flush_locked()
            self.post(ArmStatusChanged(event))

    # -- flushing ---------------------------------------------------------------
    @property
    def interval(self) -> float:
        return 1.0 / self.cadence.text_hz

    @property
    def metrics_interval(self) -> float:
        return 1.0 / self.cadence.metrics_hz

    def _arm(self, arm: str) -> _Live:
        live = self._live.get(arm)
        if live is None:
            live = self._live[arm] = _Live(arm)
        return live

    def _start_flusher(self) -> None:
        self._stop.clear()
        self._flusher = threading.Thread(target=self._flush_loop, name="lab-tui-flush", daemon=True)
        self._flusher.start()

    def _flush_loop(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                self._flush_locked(force=False)

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self, force: bool = True) -> None:
        """Post what is pending. Text and steps go every time; figures at
        most ``cadence.metrics_hz`` times a second unless ``force``."""
        now = time.monotonic()
        for live in self._live.values():
            if not live.dirty:
                continue
            live.dirty = False
            # the target's last token may await its step event (and the
            # rejected-drafts mark before it): keep it for the next batch
            kept = live.segments.pop() if not force and live.step_owed and live.segments else None
            if live.segments or live.pending_steps:
                rate = None
                tps = live.tok_per_s()
                if tps is not None and live.first_t is not None and live.last_t is not None:
                    rate = (live.last_t - live.first_t, tps)
                self.post(TokensLanded(
                    events.Cell(live.arm, live.prompt, live.round), _merge(live.segments),
                    tuple(live.pending_steps), rate, tuple(live.marks),
                ))
                live.segments = []
                live.marks = []
                live.pending_steps = []
            live.segments = [kept] if kept is not None else []
            live.batch_chars = len(kept[0]) if kept is not None else 0
            if kept is not None:
                live.dirty = True
            if live.metrics_dirty and (force or now - live.metrics_posted_at >= self.metrics_interval):
                live.metrics_dirty = False
                live.metrics_posted_at = now
                self.post(ArmMetricsUpdated(live.snapshot()))
            elif live.metrics_dirty:
                live.dirty = True  # figures still owed: the next flush looks again


def _merge(pieces: list[tuple[str, bool]]) -> tuple[tuple[str, bool], ...]:
    """Join runs of pieces with the same origin (drafted or not)."""
    out: list[tuple[str, bool]] = []
    run: list[str] = []
    flag = False
    for text, from_draft in pieces:
        if run and from_draft != flag:
            out.append(("".join(run), flag))
            run = []
        flag = from_draft
        run.append(text)
    if run:
        out.append(("".join(run), flag))
    return tuple(out)
