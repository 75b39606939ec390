"""ComparisonTable: arm x prompt over the rounds that finished, filled in as
cells finish (medians over ok rounds, as in the saved report).

Every row is one line; the verdict takes the width left (abbreviated where
it does not fit) and below VERDICT_ROOM columns give way in GIVE_WAY order.
VerdictLine under the table holds the highlighted row's full verdict and
what the table left out."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from rich.text import Text
from textual.widgets import DataTable, Static

from lab.analysis.run import summarize
from lab.base.units import DASH, mib_from_bytes, number, percent, speedup
from lab.base.verdict import THREADS_WARNING, busy_warning

COLUMNS = (
    ("arm", "arm"), ("prompt", "prompt"), ("status", "status"), ("tok_s", "tok/s"),
    ("speedup", "speedup"), ("accept", "accept"), ("mean_len", "mean len"),
    ("cost", "cost/yield"), ("peak", "peak mem"), ("identical", "identical"),
    ("verdict", "verdict"),
)
VERDICT_MIN = 24  # narrower than this the table scrolls sideways
VERDICT_ROOM = 36
# what gives way, first to last: the tok/s range, then whole columns
TOK_RANGE = "tok_range"
GIVE_WAY = (TOK_RANGE, "peak", "identical", "mean_len", "cost", "accept")
# DataTable pads each cell one column a side; the scrollbar takes two
CELL_PAD = 2
SCROLLBAR = 2


def row_key(arm: str, prompt: str) -> str:
    return f"{arm}\x1f{prompt}"


# the kinds a verdict line can report, most specific first
MEASURED_KINDS = ("structural loss", "break-even", "pays", "loses")


def verdict_style(verdict: str) -> str:
    if verdict.startswith("pays"):
        return "green"
    if verdict.startswith(("loses", "structural", "failed")):
        return "red"
    if verdict.startswith(("cancelled", "skipped")):
        return "dim"
    return ""


def short_verdict(s: Mapping[str, Any]) -> str:
    """The verdict's kind and the figures it rests on, for narrow tables:
    "loses 0.62x · lands 1.80, costs 2.95"."""
    kind = str(s.get("verdict_kind") or s.get("verdict") or "")
    line = str(s.get("verdict") or "")
    prefix = ""
    if kind == "uncertain":
        # a busy machine's verdict still says what was measured: keep both
        prefix = "busy: "
        measured = line.split("measured ", 1)[-1]
        kind = next((k for k in MEASURED_KINDS if measured.startswith(k)), kind)
    sp, length, cost = s.get("speedup"), s.get("mean_accepted_len"), s.get("step_cost_tokens")
    if kind in ("pays", "break-even", "loses") and sp is not None and length is not None and cost is not None:
        return f"{prefix}{kind} {sp:.2f}x · lands {length:.2f}, costs {cost:.2f}"
    if kind == "structural loss" and sp is not None and cost is not None:
        return f"{prefix}structural {sp:.2f}x · costs {cost:.2f} ≥ yield {s.get('max_yield')}"
    # failures and the rest: the line up to its first clause
    head = line.split(";")[0].split(" (")[0]
    return head if len(head) <= 40 else head[:39] + "…"


def fit(text: str, width: int) -> str:
    """``text`` on one line of ``width`` cells, cut with "…" when longer."""
    return text if Text(text).cell_len <= width else text[: max(0, width - 1)] + "…"


def short_busy(s: Mapping[str, Any]) -> str:
    """The busy-machine mark in a few cells ("⚠ busy 1/2"), "" without one."""
    full = busy_warning(s)
    if not full:
        return ""
    if full.startswith(THREADS_WARNING):
        return "⚠ threads"
    busy, rounds = s.get("contended_rounds"), s.get("rounds")
    part = f" {busy}/{rounds}" if isinstance(busy, int) and isinstance(rounds, int) and 0 < busy < rounds else ""
    return f"⚠ busy{part}"


def one_line_verdict(cell: str | Text, s: Mapping[str, Any] | None, width: int) -> Text:
    """The verdict cell on one line: in full where it fits, else its kind
    and figures, cut to the width past that; a busy-machine mark is
    shortened, never dropped, so the row says what the line under it says."""
    text = cell if isinstance(cell, Text) else Text(str(cell))
    if text.cell_len <= width:
        return text
    if s is not None:
        short, busy = short_verdict(s), busy_warning(s)
        if busy and Text(short + " " + busy).cell_len > width:
            busy = short_busy(s)
        head = Text(fit(short, width - (Text(busy).cell_len + 1 if busy else 0)),
                    style=verdict_style(str(s.get("verdict") or "")))
        return head + Text(" " + busy, style="yellow") if busy else head
    return Text(fit(text.plain, width), style=text.style)


def tok_range(s: Mapping[str, Any]) -> str:
    """" (min–max)" of tok/s over the rounds, "" for one round."""
    if s.get("tok_per_s_min") is None or (s.get("rounds") or 0) <= 1:
        return ""
    return f" ({s['tok_per_s_min']:.0f}–{s['tok_per_s_max']:.0f})"


def summary_cells(s: Mapping[str, Any]) -> list[str | Text]:
    cost = DASH if s["step_cost_tokens"] is None else f"{s['step_cost_tokens']:.2f} / {s['max_yield']}"
    if s["identical_to_baseline"] is None:
        ident = DASH
    elif s["identical_to_baseline"]:
        ident = "yes"
    else:
        ident = f"no @{s['first_divergence_char']}"
    tps = number(s["tok_per_s"]) + tok_range(s)
    verdict = str(s["verdict"] or "")
    busy = busy_warning(s)
    return [
        s["arm"], s["prompt"], s["status"], tps, speedup(s["speedup"]), percent(s["acceptance_rate"], '.0f'),
        number(s["mean_accepted_len"], '.2f'), cost, mib_from_bytes(s["peak_mem_bytes"]), ident,
        Text(verdict, style=verdict_style(verdict)) + (Text(" " + busy, style="yellow") if busy else Text("")),
    ]


def _width(cell: str | Text) -> int:
    return cell.cell_len if isinstance(cell, Text) else Text(str(cell)).cell_len


class VerdictLine(Static):
    """The highlighted row's verdict in full, whatever the table's width."""


class ComparisonTable(DataTable[Any]):
    """Per arm x prompt: tok/s, speedup over its stack's baseline, acceptance,
    mean accepted length, step cost against max yield, peak memory, greedy
    equivalence and the verdict."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, zebra_stripes=True, cursor_type="row")
        # what each line shows, in table order: its cells and its summary
        self._lines: dict[str, tuple[list[str | Text], Mapping[str, Any] | None]] = {}

    def on_mount(self) -> None:
        self._rebuild()

    def on_resize(self) -> None:
        self._rebuild()

    def set_cells(self, arms: Sequence[str], prompts: Sequence[str]) -> None:
        """One pending row per arm x prompt, in profile order."""
        self._lines = {
            row_key(arm, prompt): ([arm, prompt, "pending", *([DASH] * (len(COLUMNS) - 3))], None)
            for arm in arms for prompt in prompts
        }
        self._rebuild()

    def show(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Summarize ``rows`` into their arm x prompt lines (every round of
        an arm x prompt the table should show must be among them); lines
        of other cells stay as they are."""
        for s in summarize(rows):
            self._lines[row_key(s["arm"], s["prompt"])] = (summary_cells(s), s)
        self._rebuild()

    def lines(self) -> list[str]:
        """The row keys, in table order."""
        return list(self._lines)

    def summary(self, key: str) -> Mapping[str, Any] | None:
        line = self._lines.get(key)
        return line[1] if line else None

    def _cells(self, cells: list[str | Text], summary: Mapping[str, Any] | None, ranged: bool) -> list[str | Text]:
        """A line's cells, its tok/s without the range unless ``ranged``."""
        if ranged or summary is None or not tok_range(summary):
            return cells
        return [*cells[:3], number(summary["tok_per_s"]), *cells[4:]]

    def _widths(self, ranged: bool = True) -> dict[int, int]:
        """Each column's width but the verdict's: its widest cell, padded."""
        cells = [self._cells(c, s, ranged) for c, s in self._lines.values()]
        return {i: max([len(label)] + [_width(c[i]) for c in cells]) + CELL_PAD
                for i, (_, label) in enumerate(COLUMNS[:-1])}

    def set_status(self, arm: str, prompt: str, status: str) -> None:
        """A cell of a line that has no finished round yet started: its
        status cell says so (running, warmup) instead of "pending"."""
        key = row_key(arm, prompt)
        line = self._lines.get(key)
        if line is None or line[1] is not None:
            return
        cells = list(line[0])
        cells[2] = status
        self._lines[key] = (cells, None)
        self._rebuild()

    def layout_columns(self) -> tuple[list[int], int, bool]:
        """Which columns show (indices into COLUMNS, the verdict last), the
        width the verdict gets and whether tok/s keeps its range: what gave
        way (GIVE_WAY) for the verdict to have VERDICT_ROOM."""
        total = (self.size.width or self.app.size.width) - CELL_PAD - SCROLLBAR
        keys = [k for k, _ in COLUMNS]
        shown = list(range(len(COLUMNS) - 1))
        ranged = True
        widths = self._widths(ranged)
        for step in GIVE_WAY:
            if total - sum(widths[i] for i in shown) >= VERDICT_ROOM:
                break
            if step == TOK_RANGE:
                ranged = False
                widths = self._widths(ranged)
            else:
                shown.remove(keys.index(step))
        return shown + [len(COLUMNS) - 1], max(VERDICT_MIN, total - sum(widths[i] for i in shown)), ranged

    def left_out(self, key: str) -> list[str]:
        """What the table leaves out of line ``key`` at its width: "label
        value" of each column that gave way, the tok/s range."""
        cells, summary = self._lines.get(key, ([], None))
        if summary is None:
            return []
        shown, _, ranged = self.layout_columns()
        out = [] if ranged or not tok_range(summary) else [f"tok/s {cells[3]}"]
        out += [f"{label} {cells[i]}" for i, (_, label) in enumerate(COLUMNS[:-1])
                if i not in shown and str(cells[i]) != DASH]
        return out

    def _rebuild(self) -> None:
        """Lay the table out again for its lines and width (a few dozen rows
        at most: rebuilding is cheaper than tracking widths cell by cell)."""
        if not self.is_mounted:
            return
        cursor = self.cursor_row
        shown, width, ranged = self.layout_columns()
        widths = self._widths(ranged)
        self.clear(columns=True)
        for i in shown[:-1]:
            self.add_column(COLUMNS[i][1], key=COLUMNS[i][0], width=widths[i] - CELL_PAD)
        self.add_column(COLUMNS[-1][1], key=COLUMNS[-1][0], width=width)
        for key, (all_cells, s) in self._lines.items():
            cells = [self._cells(all_cells, s, ranged)[i] for i in shown]
            self.add_row(*cells[:-1], one_line_verdict(cells[-1], s, width), key=key, height=1)
        if self.row_count:
            self.move_cursor(row=min(cursor, self.row_count - 1), animate=False)
        self._show_verdict()

    def _show_verdict(self) -> None:
        try:
            line = self.screen.query_one(VerdictLine)
        except Exception:  # noqa: BLE001 - a table on its own has no verdict line
            return
        keys = list(self._lines)
        if not keys or not 0 <= self.cursor_row < len(keys):
            line.update("")
            return
        cells, _ = self._lines[keys[self.cursor_row]]
        verdict = cells[-1]
        text = verdict if isinstance(verdict, Text) else Text(str(verdict))
        rest = self.left_out(keys[self.cursor_row])
        line.update(Text.assemble((f"{cells[0]} · {cells[1]}: ", "bold"), text,
                                  (("  · " + " · ".join(rest)) if rest else "", "dim")))

    def on_data_table_row_highlighted(self, _: DataTable.RowHighlighted) -> None:
        self._show_verdict()
