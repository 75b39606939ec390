"""Two saved runs side by side: what `lab report RUN_A --compare RUN_B`
says (lab.analysis.compare finds it; this screen only lays it out), each
figure of run A beside run B's, the cells whose change counts marked, and
the warnings a reader must know before trusting them."""

from __future__ import annotations

from typing import Any, Mapping

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from lab.analysis.compare import compare, conclusion, count_line, run_name, warnings
from lab.base.units import DASH
from lab.store import load_run
from lab.tui.widgets.columns import fitting

# (label, key in a compare row without its _a/_b, format)
FIGURES = (
    ("tok/s", "tok_per_s", lambda v: f"{v:.1f}"),
    ("speedup", "speedup", lambda v: f"{v:.2f}x"),
    ("accept", "acceptance_rate", lambda v: f"{v * 100:.1f}%"),
    ("cost", "step_cost_tokens", lambda v: f"{v:.2f}"),
    ("peak", "peak_mem_bytes", lambda v: f"{v / 2**20:.0f} MiB"),
)
# Where the table is wider than the screen, these pairs of columns give way
# in this order (the foot says which); the rest always show.
GIVE_WAY = (("peak_mem_bytes_a", "peak_mem_bytes_b"), ("step_cost_tokens_a", "step_cost_tokens_b"),
            ("acceptance_rate_a", "acceptance_rate_b"),
            # B's figures whose change counts stay marked without it
            ("changed",))
# a figure whose change counts, by the name compare() gives it
CHANGE_OF = {"tok_per_s": "tok/s", "speedup": "speedup", "acceptance_rate": "acceptance",
             "peak_mem_bytes": "memory"}


def figure_pair(row: Mapping[str, Any], key: str, fmt: Any) -> tuple[str, Text]:
    """Run A's figure and run B's, B's with its relative change; B marked
    when compare() counts the change."""
    a, b = row.get(f"{key}_a"), row.get(f"{key}_b")
    left = DASH if a is None else fmt(a)
    right = Text(DASH if b is None else fmt(b))
    if a is not None and b is not None and a:
        right.append(f" {(b - a) / abs(a) * 100:+.0f}%", style="dim")
    if CHANGE_OF.get(key) in row["changed"]:
        right.stylize("bold yellow")
    return left, right


def verdict_cell(row: Mapping[str, Any]) -> Text:
    a, b = row.get("verdict_kind_a") or DASH, row.get("verdict_kind_b") or DASH
    if a == b:
        return Text(str(a))
    return Text(f"{a} → {b}", style="bold yellow")


class CompareCaption(Static):
    """Which runs, and the warnings before the cells."""


class CompareFoot(Static):
    """How many cells changed, and what counts as a change."""


class CompareScreen(Screen[None]):
    BINDINGS = [Binding("escape", "app.pop_screen", "Back")]

    def __init__(self, data_a: Mapping[str, Any], data_b: Mapping[str, Any], dir_a: str = "", dir_b: str = "") -> None:
        super().__init__()
        self.data_a, self.data_b = data_a, data_b
        self.dir_a, self.dir_b = dir_a, dir_b
        self.rows = compare(data_a, data_b)
        self.warned = warnings(data_a, data_b, self.rows)
        self.shown_columns: list[str] = []

    @classmethod
    def open(cls, run_a: str, run_b: str) -> CompareScreen | str:
        """The screen for two run directories, or what keeps one from being read."""
        try:
            return cls(load_run(run_a), load_run(run_b), run_a, run_b)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return f"cannot compare {run_a} with {run_b}: {exc}"

    def caption(self) -> Text:
        text = Text.assemble(
            ("A ", "bold"), run_name(self.data_a), (f"  {self.dir_a}" if self.dir_a else "", "dim"), "\n",
            ("B ", "bold"), run_name(self.data_b), (f"  {self.dir_b}" if self.dir_b else "", "dim"))
        for w in self.warned:
            text.append("\n")
            text.append("warning: ", style="bold yellow")
            text.append(w)
        return text

    def foot(self) -> str:
        """What `lab report --compare` leads with: the conclusion, then what counts as a change."""
        return f"{conclusion(self.data_a, self.data_b, self.rows)}\n{count_line(self.rows)}"

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="compare"):
            yield CompareCaption(self.caption(), id="compare-caption")
            yield DataTable(id="compare-table", cursor_type="row", zebra_stripes=True)
            yield CompareFoot(self.foot(), id="compare-foot", markup=False)
        yield Footer()

    def columns(self) -> list[tuple[str, str]]:
        """(key, label) of every column, in order: what a reader came for
        first (tok/s, speedup, verdict, what changed), then the rest."""
        cols = [("arm", "arm"), ("prompt", "prompt")]
        for label, key, _ in FIGURES[:2]:
            cols += [(f"{key}_a", f"{label} A"), (f"{key}_b", f"{label} B")]
        cols += [("verdict", "verdict A → B"), ("changed", "changed")]
        for label, key, _ in FIGURES[2:]:
            cols += [(f"{key}_a", f"{label} A"), (f"{key}_b", f"{label} B")]
        return cols

    def cells(self) -> list[list[str | Text]]:
        """Every row's cells, one per column of :meth:`columns`."""
        out = []
        for r in self.rows:
            cells: list[str | Text] = [r["arm"], r["prompt"]]
            for _, key, fmt in FIGURES[:2]:
                cells.extend(figure_pair(r, key, fmt))
            changed = ", ".join(r["changed"])
            cells += [verdict_cell(r), Text(changed or DASH, style="bold yellow" if changed else "dim")]
            for _, key, fmt in FIGURES[2:]:
                cells.extend(figure_pair(r, key, fmt))
            out.append(cells)
        return out

    def on_mount(self) -> None:
        self._fill()
        self.query_one(DataTable).focus()

    def on_resize(self) -> None:
        self._fill()

    def _fill(self) -> None:
        """The columns that fit the screen (GIVE_WAY), the rows, and the foot
        naming what gave way."""
        table = self.query_one(DataTable)
        columns, cells = self.columns(), self.cells()
        shown = fitting(columns, cells, self.size.width or self.app.size.width, GIVE_WAY)
        if shown == self.shown_columns:
            return
        self.shown_columns = shown
        table.clear(columns=True)
        labels = dict(columns)
        for key in shown:
            table.add_column(labels[key], key=key)
        index = [key for key, _ in columns]
        for r, row in zip(self.rows, cells):
            table.add_row(*(row[index.index(key)] for key in shown), key=f"{r['arm']}\x1f{r['prompt']}")
        hidden = [label for label, key, _ in FIGURES if f"{key}_a" not in shown]
        hidden += [] if "changed" in shown else ["changed (B's figures that changed stay marked)"]
        foot = self.foot()
        if hidden:
            foot += (f" Not shown at this width: {', '.join(hidden)} (a wider terminal, or `lab report A --compare "
                     "B`, shows them).")
        self.query_one(CompareFoot).update(foot)
