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

from lab.analysis.compare import compare, run_name, warnings
from lab.base.units import DASH
from lab.store import load_run

# (label, key in a compare row without its _a/_b, format)
FIGURES = (
    ("tok/s", "tok_per_s", lambda v: f"{v:.1f}"),
    ("speedup", "speedup", lambda v: f"{v:.2f}x"),
    ("accept", "acceptance_rate", lambda v: f"{v * 100:.1f}%"),
    ("cost", "step_cost_tokens", lambda v: f"{v:.2f}"),
    ("peak", "peak_mem_bytes", lambda v: f"{v / 2**20:.0f} MiB"),
)
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
        changed = sum(1 for r in self.rows if r["changed"])
        return (f"{changed} of {len(self.rows)} cells changed. A speedup change counts when it leaves A's 95% "
                "interval (or moves more than 2% without one).")

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="compare"):
            yield CompareCaption(self.caption(), id="compare-caption")
            yield DataTable(id="compare-table", cursor_type="row", zebra_stripes=True)
            yield CompareFoot(self.foot(), id="compare-foot", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_column("arm", key="arm")
        table.add_column("prompt", key="prompt")
        # what a reader came for first (tok/s, speedup, verdict, what
        # changed), so it shows at 100 columns; the rest scrolls sideways
        for label, key, _ in FIGURES[:2]:
            table.add_column(f"{label} A", key=f"{key}_a")
            table.add_column(f"{label} B", key=f"{key}_b")
        table.add_column("verdict A → B", key="verdict")
        table.add_column("changed", key="changed")
        for label, key, _ in FIGURES[2:]:
            table.add_column(f"{label} A", key=f"{key}_a")
            table.add_column(f"{label} B", key=f"{key}_b")
        for r in self.rows:
            cells: list[str | Text] = [r["arm"], r["prompt"]]
            for _, key, fmt in FIGURES[:2]:
                cells.extend(figure_pair(r, key, fmt))
            changed = ", ".join(r["changed"])
            cells += [verdict_cell(r), Text(changed or DASH, style="bold yellow" if changed else "dim")]
            for _, key, fmt in FIGURES[2:]:
                cells.extend(figure_pair(r, key, fmt))
            table.add_row(*cells, key=f"{r['arm']}\x1f{r['prompt']}")
        table.focus()
