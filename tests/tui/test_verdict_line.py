"""The line under the comparison table and the highlighted row say the same
thing about a busy machine as the row changes. At 80 columns the verdict
column is too narrow for "baseline ⚠ busy machine (1 of 2 rounds)": the row
once fell back to its short verdict without the mark while the line kept it
whole, so the line read as stale ("baseline ⚠ busy machine" under a row that
no longer said busy)."""

from __future__ import annotations

from typing import Any

import pytest
from rich.text import Text
from textual.app import App, ComposeResult

from lab.base.row import ResultRow
from lab.tui.widgets.comparison import ComparisonTable, VerdictLine, row_key

pytestmark = pytest.mark.anyio
ARMS = ("baseline", "ngram", "draft-q4_0", "oracle")
PROMPTS = ("prose", "code")


class TableHolder(App[None]):
    def compose(self) -> ComposeResult:
        yield ComparisonTable(id="comparison")
        yield VerdictLine(id="verdict-line")

    def on_mount(self) -> None:
        table = self.query_one(ComparisonTable)
        table.set_cells(ARMS, PROMPTS)
        table.focus()


def _round(rnd: int, busy: bool, **kw: Any) -> ResultRow:
    return ResultRow.from_json({
        "arm": "baseline", "backend": "llamacpp", "drafter": None, "prompt": "prose", "round": rnd,
        "status": "ok", "n_tokens": 120, "tok_per_s": 140.0 + rnd, "is_baseline": True, "gen_s": 0.85,
        "contended": busy, "contention_note": "others used 1.3 cores" if busy else "", **kw})


async def _shown(pilot: Any, rows: list[ResultRow] | None = None, key: str = "") -> tuple[str, str]:
    """The highlighted row's verdict cell and the line under the table,
    after the table shows ``rows`` or ``key`` is pressed."""
    app = pilot.app
    table = app.query_one(ComparisonTable)
    if rows is not None:
        table.show(rows)
    if key:
        await pilot.press(key)
    await pilot.pause()
    key = table.lines()[table.cursor_row]
    cell = table.get_cell(key, "verdict")
    line = app.query_one(VerdictLine).render()
    return (cell.plain if isinstance(cell, Text) else str(cell)), str(line)


async def test_the_row_and_the_line_under_it_agree_on_a_busy_machine_as_rounds_land() -> None:
    app = TableHolder()
    async with app.run_test(size=(80, 20)) as pilot:
        table = app.query_one(ComparisonTable)
        assert table.lines()[table.cursor_row] == row_key("baseline", "prose")

        cell, line = await _shown(pilot, [_round(1, busy=True)])
        assert "⚠ busy machine" in line and "⚠ busy" in cell, (cell, line)

        # a second round on a quiet machine: the mark says one of two, in the row as below it
        cell, line = await _shown(pilot, [_round(1, busy=True), _round(2, busy=False)])
        assert "⚠ busy machine (1 of 2 rounds)" in line, line
        assert table.ordered_columns[-1].width < len("baseline ⚠ busy machine (1 of 2 rounds)")  # the narrow case
        assert "⚠ busy 1/2" in cell, (cell, line)

        # and where the engine wanted more cores than were free, both say so
        cell, line = await _shown(pilot, [_round(1, busy=True, threads_hint=1), _round(2, busy=True, threads_hint=1)])
        assert "(try threads = 1)" in line and "⚠ busy" in cell, (cell, line)

        # the row re-recorded quiet: neither says busy any more
        cell, line = await _shown(pilot, [_round(1, busy=False), _round(2, busy=False)])
        assert "⚠" not in cell and "⚠" not in line, (cell, line)
        assert line.startswith("baseline · prose: baseline"), line

        # another row highlighted and back: the line follows the cursor
        _, line = await _shown(pilot, key="down")
        assert line.startswith("baseline · code"), line
        _, line = await _shown(pilot, key="up")
        assert line.startswith("baseline · prose: baseline") and "⚠" not in line, line
