"""CategoryTable: per speculative arm and prompt category, acceptance, mean
accepted length and speedup with its paired interval, the same figures as
the saved report's "Per category" section (:mod:`lab.analysis.categories`).

``show_rows(rows)`` recomputes it from every row so far (live or saved);
rows given before mount show on mount."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from rich.text import Text
from textual.widgets import DataTable

from lab.analysis.categories import ALL, CategoryRow, category_table
from lab.analysis.stats import FASTER, SLOWER
from lab.base.units import DASH, number, percent, speedup
from lab.base.verdict import BUSY_WARNING
from lab.tui.widgets.columns import fitting

COLUMNS = (
    ("arm", "arm"), ("category", "category"), ("prompts", "prompts"), ("accept", "accept"),
    ("mean_len", "mean len"), ("speedup", "speedup"), ("interval", "95% interval"), ("call", "call"),
)
# Where the table is wider than its room these columns give way, in this
# order; arm, category, speedup, interval and the call always show.
GIVE_WAY = (("prompts",), ("mean_len",), ("accept",))


def row_key(arm: str, category: str) -> str:
    return f"{arm}\x1f{category}"


def busy_arms(rows: Sequence[Mapping[str, Any]]) -> set[str]:
    """Arms with a measured round taken on a busy machine, theirs or their
    baseline's: their "faster"/"slower" calls rest on a machine that was
    doing other work."""
    busy = {r.get("arm") for r in rows if r.get("contended") and r.get("status") == "ok"}
    return {str(r.get("arm")) for r in rows
            if r.get("arm") in busy or (r.get("baseline_arm") and r.get("baseline_arm") in busy)}


def category_cells(r: CategoryRow, busy: bool = False) -> list[str | Text]:
    interval = DASH
    if r.speedup_low is not None and r.speedup_high is not None:
        interval = f"{r.speedup_low:.2f}–{r.speedup_high:.2f}"
    style = "green" if r.call == FASTER else "red" if r.call == SLOWER else ""
    category = Text(r.category, style="bold") if r.category == ALL else r.category
    return [
        r.arm, category, str(r.prompts), percent(r.acceptance_rate, '.0f'), number(r.mean_accepted_len, '.2f'),
        speedup(r.speedup), interval,
        Text(r.call, style=style) + (Text(" " + BUSY_WARNING, style="yellow") if busy and r.call in (FASTER, SLOWER)
                                     else Text("")),
    ]


class CategoryTable(DataTable[Any]):
    """Per arm x category over the rows given: acceptance, mean accepted
    length, speedup over the stack's baseline and its paired interval; the
    least telling columns give way where the table would be cut (GIVE_WAY)."""

    def __init__(self, rows: Sequence[Mapping[str, Any]] = (), *, id: str | None = None) -> None:
        super().__init__(id=id, zebra_stripes=True, cursor_type="row")
        self._rows: list[Mapping[str, Any]] = list(rows)
        self._mounted = False
        self.shown_columns: list[str] = []

    def on_mount(self) -> None:
        self._mounted = True
        self.show_rows(self._rows)

    def on_resize(self) -> None:
        if self._mounted:
            self.show_rows(self._rows)

    def show_rows(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Replace the table with the figures of ``rows`` (every row of the
        run so far, not just the newest)."""
        self._rows = list(rows)
        if not self._mounted:  # not mounted yet: on_mount shows them
            return
        busy = busy_arms(self._rows)
        table = category_table(self._rows)
        cells = [category_cells(r, r.arm in busy) for r in table]
        width = self.size.width or self.app.size.width
        shown = fitting(COLUMNS, cells, width, GIVE_WAY)
        if shown != self.shown_columns:
            self.clear(columns=True)
            labels = dict(COLUMNS)
            for key in shown:
                self.add_column(labels[key], key=key)
            self.shown_columns = shown
        else:
            self.clear()
        index = [key for key, _ in COLUMNS]
        for r, row in zip(table, cells):
            self.add_row(*(row[index.index(key)] for key in shown), key=row_key(r.arm, r.category))
