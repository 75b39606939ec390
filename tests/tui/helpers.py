"""Shared by the TUI tests."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

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
