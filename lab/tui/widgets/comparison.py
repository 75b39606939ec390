"""ComparisonTable: arm x prompt over the rounds that finished, filled in as
cells finish (medians over ok rounds, as in the saved report)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from rich.text import Text
from textual.widgets import DataTable

from lab.report import summarize
from lab.tui.widgets.fmt import DASH, mib, num, pct, speedup

COLUMNS = (
    ("arm", "arm"), ("prompt", "prompt"), ("status", "status"), ("tok_s", "tok/s"),
    ("speedup", "speedup"), ("accept", "accept"), ("mean_len", "mean len"),
    ("cost", "step cost / max yield"), ("peak", "peak mem"), ("identical", "identical"),
    ("verdict", "verdict"),
)


def row_key(arm: str, prompt: str) -> str:
    return f"{arm}\x1f{prompt}"


def summary_cells(s: Mapping[str, Any]) -> list[str | Text]:
    cost = DASH if s["step_cost_tokens"] is None else f"{s['step_cost_tokens']:.2f} / {s['max_yield']}"
    if s["identical_to_baseline"] is None:
        ident = DASH
    elif s["identical_to_baseline"]:
        ident = "yes"
    else:
        ident = f"no @{s['first_divergence_char']}"
    tps = num(s["tok_per_s"])
    if s["tok_per_s_min"] is not None and s["rounds"] > 1:
        tps += f" ({s['tok_per_s_min']:.0f}–{s['tok_per_s_max']:.0f})"
    verdict = str(s["verdict"] or "")
    style = "green" if verdict.startswith("pays") else "red" if verdict.startswith(("loses", "structural", "failed")) else ""
    return [
        s["arm"], s["prompt"], s["status"], tps, speedup(s["speedup"]), pct(s["acceptance_rate"]),
        num(s["mean_accepted_len"], ".2f"), cost, mib(s["peak_mem_bytes"]), ident, Text(verdict, style=style),
    ]


class ComparisonTable(DataTable[Any]):
    """Per arm x prompt: tok/s, speedup over its stack's baseline, acceptance,
    mean accepted length, step cost against max yield, peak memory, greedy
    equivalence and the verdict."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, zebra_stripes=True, cursor_type="row")

    def on_mount(self) -> None:
        for key, label in COLUMNS:
            self.add_column(label, key=key)

    def set_cells(self, arms: Sequence[str], prompts: Sequence[str]) -> None:
        """One pending row per arm x prompt, in profile order."""
        self.clear()
        for arm in arms:
            for prompt in prompts:
                self.add_row(arm, prompt, "pending", *([DASH] * (len(COLUMNS) - 3)), key=row_key(arm, prompt))

    def show(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Summarize ``rows`` into their arm x prompt lines (every round of
        an arm x prompt the table should show must be among them); lines
        of other cells stay as they are."""
        for s in summarize(rows):
            self._put(s)

    def _put(self, s: Mapping[str, Any]) -> None:
        key = row_key(s["arm"], s["prompt"])
        cells = summary_cells(s)
        if key not in self.rows:
            self.add_row(*cells, key=key)
            return
        for (col, _), value in zip(COLUMNS, cells):
            self.update_cell(key, col, value)
