"""Shared by the TUI tests."""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from textual.pilot import Pilot


async def wait_until(pilot: Pilot[Any], cond: Callable[[], bool], timeout: float = 20.0, what: str = "") -> None:
    """Let the app process messages until ``cond()`` holds (no fixed sleeps)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or cond}")
        await pilot.pause(0.02)
    await pilot.pause()


async def run_finished(pilot: Pilot[Any], timeout: float = 30.0) -> None:
    app = pilot.app
    await app.workers.wait_for_complete()
    await wait_until(pilot, lambda: getattr(app.screen, "state", "") in ("done", "cancelled", "failed"),
                     timeout, "the run screen to show the run ended")
    await asyncio.sleep(0)


@asynccontextmanager
async def finished_run(profile: Path, runs_dir: Path, timeout: float,
                       registry: Any = None) -> AsyncIterator[tuple[Pilot[Any], Any, list[Any]]]:
    """Open the TUI on ``profile`` with the installed plugins (or
    ``registry``), press s and wait for the run to end; yields the pilot, the
    run screen and every TokensLanded batch the app handled. The app quits
    on leaving."""
    from lab.registry import load_registry
    from lab.tui.app import LabApp
    from lab.tui.messages import TokensLanded
    from lab.tui.screens.run import RunScreen

    batches: list[TokensLanded] = []

    def hook(message: object) -> None:
        if isinstance(message, TokensLanded):
            batches.append(message)

    app = LabApp(str(profile), registry=registry or load_registry(), runs_dir=runs_dir)
    async with app.run_test(size=(140, 45), message_hook=hook) as pilot:
        screen = app.screen
        assert isinstance(screen, RunScreen)
        await pilot.press("s")
        await run_finished(pilot, timeout=timeout)
        yield pilot, screen, batches
        await pilot.press("q")
