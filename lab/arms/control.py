"""The run's controls a UI holds while a run goes (:class:`RunControl`),
and what keeps a run (:class:`RunSink`); the runner and every arm read them."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from lab.base.cells import Status, now
from lab.base.events import RunEvent


@dataclass
class RunControl:
    """Thread-safe controls a UI can use while a run is going, and what the
    runner reads of them."""

    _cancel: threading.Event = field(default_factory=threading.Event)
    _skip_arm: threading.Event = field(default_factory=threading.Event)
    _resume: threading.Event = field(default_factory=threading.Event)
    _cancelled_arms: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._resume.set()

    def cancel(self) -> None:
        self._cancel.set()

    def skip_arm(self) -> None:
        """Stop the running arm at its next step; the run goes on."""
        self._skip_arm.set()

    def begin_arm(self) -> None:
        """An arm starts: a skip asked for the one before it is spent."""
        self._skip_arm.clear()

    @property
    def skip_requested(self) -> bool:
        return self._skip_arm.is_set()

    @property
    def stop_requested(self) -> bool:
        """The running arm should stop: the run was cancelled or the arm skipped."""
        return self._cancel.is_set() or self._skip_arm.is_set()

    def cancel_arm(self, arm: str) -> None:
        """Cancel one arm that has not started: the runner records its cells
        as cancelled without loading its engine."""
        with self._lock:
            self._cancelled_arms.add(arm)

    def arm_cancelled(self, arm: str) -> bool:
        with self._lock:
            return arm in self._cancelled_arms

    def stop_status(self, arm: str) -> Status:
        """What the cells of ``arm`` that stop now are recorded as: skipped
        when the user only moved on to the next arm, else cancelled."""
        if self._cancel.is_set() or self.arm_cancelled(arm):
            return Status.CANCELLED
        return Status.SKIPPED

    def pause(self) -> None:
        """Hold the run at its next pause point: the next step of a backend
        that pauses between steps, else the next cell."""
        self._resume.clear()

    def resume(self) -> None:
        self._resume.set()

    @property
    def paused(self) -> bool:
        return not self._resume.is_set()

    def hold(self) -> float:
        """Block while paused (a cancel or a skip ends the hold too);
        returns the seconds held."""
        t0 = now()
        while not self._resume.wait(0.05):
            if self.stop_requested:
                break
        return now() - t0

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()


class RunSink(Protocol):
    """A listener that keeps the run somewhere (lab.store.RunStore): it
    hears every event first, and engines write their own logs beside it."""

    @property
    def path(self) -> Path: ...

    def __call__(self, event: RunEvent) -> None: ...
