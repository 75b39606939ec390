"""One live run: the runner on a worker thread, its controls and the bridge
that carries its events to the run screen."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from textual.message import Message

from lab.plugins import Registry
from lab.profiles import Profile
from lab.runner import RunControl, Runner
from lab.store import RunStore
from lab.tui.bridge import EventBridge


@dataclass
class RunSession:
    profile: Profile
    registry: Registry
    runs_dir: Path
    post: Callable[[Message], object]
    control: RunControl = field(default_factory=RunControl)
    done: threading.Event = field(default_factory=threading.Event)
    store: RunStore | None = None
    results: list[dict[str, Any]] = field(default_factory=list)
    bridge: EventBridge = field(init=False)

    def __post_init__(self) -> None:
        self.bridge = EventBridge(self.post, self.control)
        self.done.set()  # nothing runs until start()

    def start(self) -> None:
        """Called on the UI thread just before the worker is started."""
        self.done.clear()

    @property
    def run_dir(self) -> Path | None:
        return self.store.path if self.store is not None else None

    @property
    def running(self) -> bool:
        return not self.done.is_set()

    def run_blocking(self) -> list[dict[str, Any]]:
        """The worker's body: blocks until every arm finished or the run was
        cancelled; the runner closes every backend on every path."""
        try:
            if self.control.cancelled:
                return []
            self.store = RunStore(self.profile, self.runs_dir)
            runner = Runner(self.profile, self.registry, self.store, [self.bridge], self.control)
            self.results = runner.run()
            return self.results
        finally:
            self.done.set()

    def stop(self, timeout: float = 30.0) -> bool:
        """Cancel and wait for the runner to close its engines."""
        self.bridge.cancel()
        return self.done.wait(timeout)
