"""A reading taken on its own thread at a fixed interval: the memory and GPU
samplers share this life cycle."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from typing import TypeVar

S = TypeVar("S", bound="PeriodicSampler")


class PeriodicSampler(ABC):
    """``sample()`` on start, every ``interval`` seconds on a daemon thread and
    once on stop; a failing reading is skipped, never breaking a run. While
    paused its thread sleeps: an arm that waits for its turn (several loaded
    at once) costs the machine nothing."""

    def __init__(self, interval: float, name: str) -> None:
        self.interval = interval
        self._name = name
        self._stop = threading.Event()
        self._active = threading.Event()
        self._active.set()
        self._thread: threading.Thread | None = None

    @abstractmethod
    def sample(self) -> object: ...

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._active.wait()
            if self._stop.wait(self.interval):
                break
            if not self._active.is_set():
                continue
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - sampling must never break a run
                continue

    def pause(self) -> None:
        """No readings until :meth:`resume` (one is taken on resuming)."""
        self._active.clear()

    def resume(self) -> None:
        if not self._active.is_set():
            try:
                self.sample()
            except Exception:  # noqa: BLE001
                pass
            self._active.set()

    def start(self: S) -> S:
        self.sample()
        self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._active.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        try:
            self.sample()
        except Exception:  # noqa: BLE001
            pass

    def __enter__(self: S) -> S:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
