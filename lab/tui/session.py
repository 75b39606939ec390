"""One live run: the runner on a worker thread, its controls and the bridge
that carries its events to the run screen. The runner keeps the run's rows;
the session hands them on (``rows()``)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from textual.message import Message

from lab.base.machine import available_cores
from lab.base.profile import Profile
from lab.base.row import ResultRow
from lab.profile.engines import EngineProblem, missing_engines
from lab.registry import Registry
from lab.render.report import ReportWriter
from lab.runner import RunControl, Runner
from lab.store import RunStore
from lab.tui.bridge import EventBridge
from lab.tui.cadence import Cadence, cadence_for
from lab.tui.messages import EnginesMissing


@dataclass
class RunSession:
    profile: Profile
    registry: Registry
    runs_dir: Path
    post: Callable[[Message], object]
    control: RunControl = field(default_factory=RunControl)
    done: threading.Event = field(default_factory=threading.Event)
    store: RunStore | None = None
    runner: Runner | None = None
    refresh_hz: float | None = None  # forced text rate; None: weigh each arm's engine (cadence.py)
    bridge: EventBridge = field(init=False)
    refused: tuple[EngineProblem, ...] = ()  # the engines that kept this run from starting

    def __post_init__(self) -> None:
        self.bridge = EventBridge(self.post, self.control, cadences=self.cadences())
        self.done.set()  # nothing runs until start()

    def cadences(self) -> dict[str, Cadence]:
        """The view's rates for each arm, from the cores its engine keeps busy."""
        out = {}
        for arm in self.profile.arms:
            try:
                busy = self.registry.backend(arm.backend).busy_cores(arm.options, self.profile.run.threads)
            except Exception:  # noqa: BLE001 - an unknown or broken plugin fails at load, not here
                busy = self.profile.run.threads or available_cores()
            out[arm.name] = cadence_for(busy, text_hz=self.refresh_hz)
        return out

    @property
    def cadence(self) -> Cadence:
        """The rates in use now (the running arm's)."""
        return self.bridge.cadence

    def start(self) -> None:
        """Called on the UI thread just before the worker is started."""
        self.done.clear()

    @property
    def run_dir(self) -> Path | None:
        return self.store.path if self.store is not None else None

    @property
    def running(self) -> bool:
        return not self.done.is_set()

    def rows(self) -> tuple[ResultRow, ...]:
        """The run's rows so far (the runner's; safe from the UI thread)."""
        return self.runner.rows() if self.runner is not None else ()

    def run_blocking(self) -> list[ResultRow]:
        """The worker's body, until every arm finished or the run was
        cancelled; writes report.md at the end. Missing engines: nothing runs
        and the screen hears EnginesMissing."""
        try:
            if self.control.cancelled:
                return []
            problems = missing_engines(self.profile, self.registry)
            if problems or self.control.cancelled:
                if problems:
                    self.refused = tuple(problems)
                    self.post(EnginesMissing(self.refused))
                return []
            self.store = RunStore(self.profile, self.runs_dir)
            self.runner = Runner(self.profile, self.registry, self.store, [ReportWriter(), self.bridge], self.control)
            return self.runner.run()
        finally:
            self.done.set()

    def stop(self, timeout: float = 30.0) -> bool:
        """Cancel and wait for the runner to close its engines."""
        self.bridge.cancel()
        return self.done.wait(timeout)
