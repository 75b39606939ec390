"""Live memory sampling of the lab process and the engine processes it
started. Samples on its own thread; never touches an engine API."""

from __future__ import annotations

import os
from typing import Callable

from lab.base.events import Emit, MemorySample
from lab.base.periodic import PeriodicSampler


def rss_bytes(pids: list[int]) -> int:
    import psutil

    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


class MemorySampler(PeriodicSampler):
    """Samples RSS of this process and ``child_pids()`` every ``interval``
    seconds, keeping the peak; ``emit`` is called from its own thread and
    must be thread-safe."""

    def __init__(
        self,
        arm: str,
        emit: Emit,
        interval: float,
        child_pids: Callable[[], list[int]] = list,
        engine_bytes: Callable[[], int | None] = lambda: None,
        device_bytes: Callable[[], int | None] = lambda: None,
    ) -> None:
        super().__init__(interval, f"memory-{arm}")
        self.arm = arm
        self.emit = emit
        self.child_pids = child_pids
        self.engine_bytes = engine_bytes
        self.device_bytes = device_bytes
        self.peak = 0

    def sample(self) -> int:
        rss = rss_bytes([os.getpid(), *self.child_pids()])
        self.peak = max(self.peak, rss)
        self.emit(MemorySample(self.arm, rss, self.engine_bytes(), self.device_bytes()))
        return rss
