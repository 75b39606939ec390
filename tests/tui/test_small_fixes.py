"""Small things the run screen used to get wrong: a running cell's wait for
its first token stayed "—" until the cell ended; the categories tab called an arm
"faster"/"slower" without saying the machine was busy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rich.text import Text
from textual.app import App, ComposeResult

from lab.analysis.categories import category_table
from lab.analysis.stats import FASTER, SLOWER
from lab.base.verdict import BUSY_WARNING
from lab.tui.app import LabApp
from lab.tui.screens.run import RunScreen
from lab.tui.widgets.categories import CategoryTable, row_key
from tests.fakes import fake_registry, profile_toml
from tests.tui.helpers import run_finished, wait_until

pytestmark = pytest.mark.anyio


async def test_a_running_cells_ttft_shows_once_its_first_token_landed(tmp_path: Path) -> None:
    arms = """
[[arms]]
name = "base"
backend = "fake"
options = { token_delay_s = 0.05 }
"""
    path = tmp_path / "profile.toml"
    path.write_text(profile_toml(arms, max_tokens=30), encoding="utf-8")
    app = LabApp(str(path), registry=fake_registry(), runs_dir=tmp_path / "runs")
    async with app.run_test(size=(140, 45)) as pilot:
        screen = app.screen
        assert isinstance(screen, RunScreen)
        lane = screen.lane("base")
        await pilot.press("s")
        await wait_until(pilot, lambda: lane.metrics is not None and lane.metrics.ttft_s is not None,
                         what="live figures with a TTFT")
        assert lane.final is None, "the cell ended before its live figures were seen"
        figures = str(lane.query_one("LaneMetrics").render())
        # live it is named for what it is (the cell's start to its first
        # token); "ttft", the report's figure, only once the cell finished
        assert "first token after —" not in figures and "first token after " in figures
        assert "ttft" not in figures
        assert lane.metrics.ttft_s >= 0
        await run_finished(pilot)
        row = lane.final
        assert row is not None and row.ttft_s is not None
        figures = str(lane.query_one("LaneMetrics").render())
        assert f"ttft {row.ttft_s * 1000:.1f} ms" in figures and "first token after" not in figures
        await pilot.press("q")


def _rows(contended: bool) -> list[dict[str, Any]]:
    """A baseline and a speculative arm over four prompts in two
    categories, the speculative arm 1.5x as fast."""
    rows = []
    for i, category in enumerate(("code", "code", "prose", "prose")):
        prompt = f"p{i}"
        common = {"prompt": prompt, "round": 1, "status": "ok", "category": category, "n_tokens": 60,
                  "contended": contended}
        rows.append({**common, "arm": "base", "is_baseline": True, "tok_per_s": 10.0 + i * 0.01,
                     "baseline_arm": None, "speedup": None})
        rows.append({**common, "arm": "spec", "is_baseline": False, "tok_per_s": 15.0 + i * 0.02, "baseline_arm": "base",
                     "speedup": 1.5 + i * 0.001, "drafted": 40, "accepted": 30, "steps": 20, "landed": 50,
                     "mean_accepted_len": 2.5})
    return rows


class Tables(App[None]):
    def __init__(self, rows: list[dict[str, Any]]) -> None:
        super().__init__()
        self.rows = rows

    def compose(self) -> ComposeResult:
        yield CategoryTable(self.rows, id="categories")


@pytest.mark.parametrize("contended", [True, False])
async def test_the_categories_tab_says_when_a_call_was_made_on_a_busy_machine(contended: bool) -> None:
    rows = _rows(contended)
    calls = {(r.arm, r.category): r.call for r in category_table(rows)}
    assert any(c in (FASTER, SLOWER) for c in calls.values()), calls
    app = Tables(rows)
    async with app.run_test(size=(140, 20)):
        table = app.query_one(CategoryTable)
        for (arm, category), call in calls.items():
            cell = table.get_cell(row_key(arm, category), "call")
            shown = cell.plain if isinstance(cell, Text) else str(cell)
            assert shown.startswith(call)
            assert (BUSY_WARNING in shown) == (contended and call in (FASTER, SLOWER))
