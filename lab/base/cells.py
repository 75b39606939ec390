"""Which cell a figure belongs to and how it went: the run's coordinates
(arm, prompt, round), its statuses and the one clock every event reads."""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import Enum


class Status(str, Enum):
    """Status of an arm or of one arm x prompt x round cell."""

    PENDING = "pending"
    LOADING = "loading"
    WARMUP = "warmup"
    RUNNING = "running"
    OK = "ok"
    OOM = "oom"
    ERROR = "error"
    CRASHED = "crashed"
    CANCELLED = "cancelled"
    # Stopped by the user's "skip to the next arm": not measured, and
    # neither a failure nor a cancelled run.
    SKIPPED = "skipped"

    @property
    def is_final(self) -> bool:
        return self in FINAL_STATUSES


FINAL_STATUSES = frozenset(
    {Status.OK, Status.OOM, Status.ERROR, Status.CRASHED, Status.CANCELLED, Status.SKIPPED})
# cells stopped by someone (not failures), by their results.json status
STOPPED_STATUSES = frozenset({Status.CANCELLED.value, Status.SKIPPED.value})


def now() -> float:
    """Monotonic clock shared by all events (seconds)."""
    return time.perf_counter()


@dataclass(frozen=True)
class Cell:
    """Where an event belongs: one arm, one prompt, one round (0 = warmup)."""

    arm: str
    prompt: str
    round: int

    @property
    def is_warmup(self) -> bool:
        return self.round == 0


def arm_cell(arm: str) -> Cell:
    """The cell that stands for a whole arm (load, close, arm-level failures)."""
    return Cell(arm=arm, prompt="", round=-1)
