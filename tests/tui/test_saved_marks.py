"""Rejected drafts (✗n) in a saved run: a run of the fake engine that rejects
drafts, saved by the TUI, opened again as a saved run shows the same marks
in the same places as its live lane did; a run saved before steps.jsonl
recorded them opens unmarked, without an error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from textual.app import App

from lab.base.events import REJECTED_AT
from lab.tui.app import LabApp
from lab.tui.screens.run import RunScreen
from lab.tui.widgets.lane import saved_marks
from tests.fakes import fake_registry, profile_toml
from tests.tui.helpers import finished_run, wait_until
from tests.tui.test_every_terminal import REJECTING, screen_lines

pytestmark = pytest.mark.anyio
SIZE = (140, 45)


def lane_text_lines(app: App[Any], arm: str) -> list[str]:
    """The lines of ``arm``'s text as the screen shows them, marks and all."""
    screen = app.screen
    assert isinstance(screen, RunScreen)
    region = screen.lane(arm).text.region
    lines = screen_lines(app)
    shown = [lines[y][region.x:region.right].rstrip() for y in range(region.y, region.bottom)]
    while shown and not shown[-1]:
        shown.pop()
    return shown


async def _saved_view(run_dir: Path) -> tuple[list[str], str]:
    """The spec lane's lines and its text, in the saved run opened as `lab RUN_DIR` does."""
    app = LabApp(None, registry=fake_registry(), saved_run=str(run_dir), runs_dir=run_dir.parent)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, RunScreen), what="the saved run")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, RunScreen) and screen.read_only
        return lane_text_lines(app, "spec"), screen.lane("spec").text.text


async def test_a_saved_run_marks_rejected_drafts_where_the_live_lane_did(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # report.md is no part of what a saved run's lanes read, and writing it is most of this run's time
    monkeypatch.setattr("lab.tui.session.ReportWriter", lambda: (lambda event: None))
    path = tmp_path / "profile.toml"
    path.write_text(profile_toml(REJECTING, name="marks", max_tokens=40), encoding="utf-8")
    async with finished_run(path, tmp_path / "runs", 60, fake_registry()) as (pilot, screen, _):
        app = pilot.app
        live = lane_text_lines(app, "spec")
        live_text = screen.lane("spec").text.text
        rejected = screen.lane("spec").text.rejected
        run_dir = screen.run_dir()
        # the finished cell looked at again from the table: marked as it streamed
        screen.view_cell("spec", "prose")
        await pilot.pause()
        assert lane_text_lines(app, "spec") == live
    assert run_dir is not None
    body = "\n".join(live)
    # a step of [0] drafts 3 and rejects them all, one of [1] rejects 2
    assert "✗3" in body and "✗2" in body and rejected > 0, body

    saved, saved_text = await _saved_view(run_dir)
    assert saved_text == live_text
    assert saved == live  # the same marks, in the same places

    # a run saved before steps.jsonl said where drafts were rejected
    steps = run_dir / "steps.jsonl"
    records = [json.loads(line) for line in steps.read_text(encoding="utf-8").splitlines()]
    assert any(REJECTED_AT in r for r in records)
    steps.write_text("".join(json.dumps({k: v for k, v in r.items() if k != REJECTED_AT}) + "\n" for r in records),
                     encoding="utf-8")
    old, old_text = await _saved_view(run_dir)
    assert old and old_text == live_text and "✗" not in "\n".join(old)


def test_saved_marks_leave_out_what_is_no_offset() -> None:
    step = {"arm": "spec", "prompt": "prose", "round": 1, "drafted": 3, "accepted": 1}
    steps = [{**step, REJECTED_AT: 5}, {**step, REJECTED_AT: -1}, {**step, REJECTED_AT: True},
             {**step, REJECTED_AT: "7"}, {**step, REJECTED_AT: 2.0}, step,
             {**step, "accepted": 3, REJECTED_AT: 9}, {**step, "round": 2, REJECTED_AT: 0}]
    assert saved_marks(steps) == {("spec", "prose", 1): [(5, 2)], ("spec", "prose", 2): [(0, 2)]}
