"""ArmLane: one arm of the run, side by side with the others, or alone
(compact) when the terminal is too narrow for them all.

Live, the wait is "first token after" (rehearsals included); once the cell
finished, "ttft" is the report's figure."""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

from rich.cells import cell_len
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.widgets import ProgressBar, Static

from lab.base.events import REJECTED_AT, Status, StatusChanged
from lab.base.profile import Arm
from lab.base.row import ResultRow
from lab.base.units import mib_from_bytes, milliseconds, ms_from_s, number, percent
from lab.telemetry.gpu import GpuSampled
from lab.tui.messages import ArmMetrics
from lab.tui.widgets.cell_diff import CellDiff, DiffCaption, diff_caption
from lab.tui.widgets.stream_text import Mark, StreamText

# Statuses whose detail the lane shows under its badge.
FAILED = (Status.OOM, Status.CRASHED, Status.ERROR)
# the marks of a speculative lane's text, on its bottom border (the short
# form where the lane is narrow)
LEGEND = "[b $success]bold green[/]: accepted draft · plain: target's own · [$error]✗n[/]: n drafts rejected"
LEGEND_SHORT = "[b $success]green[/]: accepted · [$error]✗n[/]: rejected"
LEGEND_SHORTEST = "[$error]✗n[/]: n drafts rejected"
BASELINE_LEGEND = ("[dim]plain: the target's own tokens[/]", "[dim]plain: target's own[/]")


def lane_id(arm: str) -> str:
    return "lane-" + arm.replace(".", "_")


def describe_arm(arm: Arm) -> str:
    parts = [arm.backend]
    if arm.drafter:
        parts.append(f"{arm.drafter} n_max {arm.n_max}")
    elif not arm.is_baseline:
        parts.append(f"speculative n_max {arm.n_max}" if arm.n_max else "speculative")
    else:
        parts.append("baseline")
    return " · ".join(parts)


def saved_pieces(text: str, origin: Any) -> list[tuple[str, bool]]:
    """Split a saved text by its recorded origin runs ([chars, from_draft]);
    unmarked when the runs are missing or do not cover the text."""
    try:
        runs = [(int(n), bool(d)) for n, d in origin or ()]
    except (TypeError, ValueError):
        runs = []
    if not runs or sum(n for n, _ in runs) != len(text):
        return [(text, False)]
    pieces, at = [], 0
    for n, draft in runs:
        pieces.append((text[at:at + n], draft))
        at += n
    return pieces


def saved_marks(steps: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, int], list[Mark]]:
    """Each saved cell's rejected-draft marks by (arm, prompt, round); steps
    saved without ``rejected_at``, or with one that is not a count, mark nothing."""
    out: dict[tuple[str, str, int], list[Mark]] = {}
    for s in steps:
        at, rejected = s.get(REJECTED_AT), s["drafted"] - s["accepted"]
        if type(at) is int and at >= 0 and rejected > 0:
            out.setdefault((s["arm"], s["prompt"], s["round"]), []).append((at, rejected))
    return out


def wrapped_lines(text: str, width: int) -> int:
    """Lines ``text`` takes wrapped at word boundaries to ``width`` cells."""
    lines, used = 1, 0
    for word in text.split(" "):
        w = cell_len(word)
        need = w if used == 0 else used + 1 + w
        if need <= width:
            used = need
            continue
        if used:
            lines += 1
        lines += max(0, math.ceil(w / width) - 1)
        used = w % width or (width if w else 0)
    return lines


class ArmTitle(Static):
    """The arm's name and what it runs."""


class StatusBadge(Static):
    """The arm's status word and loading phase."""


class LaneNote(Static):
    """Why an arm failed: the first line of the engine's message."""


class LaneMetrics(Static):
    """tok/s, acceptance, mean accepted length, step timings, memory."""


class ArmLane(Vertical):
    """Title, status (with a progress bar while loading), the streaming text,
    and the live figures of the arm's current cell."""

    def __init__(self, arm: Arm) -> None:
        super().__init__(id=lane_id(arm.name), classes="lane")
        self.arm = arm
        self.status = Status.PENDING
        self.phase = ""
        self.detail = ""
        self.cell_label = ""
        self.metrics: ArmMetrics | None = None
        self.final: ResultRow | None = None
        self.speculative = not arm.is_baseline
        self.held = ""  # "pausing" or "paused" while the run holds in this arm
        self.waiting = ""  # what a pending arm waits for (the probe)
        self.compact = False  # one line of title, two of figures
        self.gpu: GpuSampled | None = None  # the latest reading while this arm runs on a GPU
        self.baseline_arm = ""  # a saved cell's diff is against this arm's text
        self.problem = ""  # why the arm cannot run here (a missing engine)

    def _title_text(self) -> str:
        sep = "  " if self.compact else "\n"
        return f"[b]{self.arm.name}[/b]{sep}[dim]{describe_arm(self.arm)}[/dim]"

    def compose(self) -> ComposeResult:
        yield ArmTitle(self._title_text())
        with Horizontal(classes="status-row"):
            yield StatusBadge(self._status_text(), classes="status pending")
            yield ProgressBar(total=1.0, show_eta=False, show_percentage=False, classes="load-progress")
        yield LaneNote("", markup=False)
        yield DiffCaption("")
        yield StreamText()
        yield CellDiff()
        yield LaneMetrics(self._metrics_text())

    def on_mount(self) -> None:
        self._metrics_lines = 0
        self.query_one(ProgressBar).display = False
        self.query_one(LaneNote).display = False
        self._show_diff(False, False)

    def on_resize(self) -> None:
        self._show_legend()
        self._show_metrics()

    def _show_legend(self) -> None:
        room = self.size.width - 4  # the border's corners and a space each side
        forms = BASELINE_LEGEND if not self.speculative else (LEGEND, LEGEND_SHORT, LEGEND_SHORTEST)
        self.border_subtitle = next((t for t in forms if Content.from_markup(t).cell_length <= room), "")

    def _show_metrics(self) -> None:
        """The figures, their widget as tall as their lines take at its
        width: laid out again only when that changes."""
        if not self.is_mounted:
            return
        widget = self.query_one(LaneMetrics)
        text = self._metrics_text()
        width = widget.size.width or max(0, self.size.width - 4) or 10**6
        lines = sum(wrapped_lines(line, width) for line in text.plain.split("\n"))
        if lines != self._metrics_lines:
            self._metrics_lines = lines
            widget.styles.height = lines
            widget.update(text)
        else:
            widget.update(text, layout=False)

    def clear_viewed(self) -> None:
        """Back to streaming: no saved cell's diff on show."""
        self.baseline_arm = ""
        self._show_diff(False, False)

    def _show_diff(self, caption: bool, differs: bool) -> None:
        """A saved cell against its baseline: the caption whenever there is
        a baseline text; the marked diff in place of the text when they differ
        (identical, the text keeps its drafted tokens marked)."""
        self.query_one(DiffCaption).display = caption
        self.set_class(caption, "-viewed")
        self.query_one(CellDiff).display = differs
        self.query_one(StreamText).display = not differs

    def _show_note(self) -> None:
        note = self.query_one(LaneNote)
        failed = self.status in FAILED and bool(self.detail)
        note.display = failed or bool(self.problem)
        if self.problem:
            note.update(self.problem)
        elif failed:
            note.update(self.detail.strip().splitlines()[0])

    def set_problem(self, problem: str) -> None:
        """Why this arm cannot run here (its engine cannot load), or "" once
        that no longer holds."""
        self.problem = problem
        self._show_note()

    def set_compact(self, compact: bool) -> None:
        if compact == self.compact:
            return
        self.compact = compact
        self.set_class(compact, "-compact")
        if self.is_mounted:
            self.query_one(ArmTitle).update(self._title_text())
            self._show_metrics()

    def set_held(self, held: str) -> None:
        """"pausing" (asked, not yet held), "paused" (held) or "" (going)."""
        self.held = held
        self._show_badge()

    def set_waiting(self, waiting: str) -> None:
        """What a pending arm waits for ("" for nothing in particular)."""
        self.waiting = waiting
        self._show_badge()

    def _show_badge(self) -> None:
        badge = self.query_one(StatusBadge)
        shown = self.shown_status()
        badge.set_classes(f"status {shown}")
        badge.update(self._status_text())

    def shown_status(self) -> str:
        if self.held and not self.status.is_final:
            return self.held
        if self.waiting and self.status == Status.PENDING:
            return "waiting"
        return self.status.value

    @property
    def text(self) -> StreamText:
        return self.query_one(StreamText)

    # -- updates -------------------------------------------------------------
    def set_status(self, event: StatusChanged) -> None:
        cell = event.cell
        if cell.round >= 0:
            if event.status in (Status.RUNNING, Status.WARMUP):
                self.text.clear()
                self.metrics = None
                self.final = None
                self.cell_label = f"{cell.prompt} {'warmup' if cell.round == 0 else 'r' + str(cell.round)}"
                self.status = event.status
                self.phase = ""
        else:
            self.status = event.status
            self.phase = event.phase
            if event.detail:
                self.detail = event.detail
        bar = self.query_one(ProgressBar)
        if self.status == Status.LOADING:
            bar.display = True
            bar.update(total=1.0 if event.progress is not None else None, progress=event.progress or 0.0)
        else:
            bar.display = False
            # a finished bar: an indeterminate one would keep animating
            bar.update(total=1.0, progress=1.0)
        if self.status != Status.PENDING:
            self.waiting = ""
        self._show_badge()
        self.set_class(self.status.is_final, "-done")
        self._show_note()
        self._show_metrics()

    def add_text(self, segments: Sequence[tuple[str, bool]], rejected: Sequence[tuple[int, int]] = ()) -> None:
        self.text.append(segments, rejected)

    def set_metrics(self, metrics: ArmMetrics) -> None:
        self.metrics = metrics
        self._show_metrics()

    def set_gpu(self, reading: GpuSampled) -> None:
        """A live GPU reading taken while this arm runs."""
        self.gpu = reading
        self._show_metrics()

    def apply_result(self, row: ResultRow) -> None:
        """A cell finished: show its measured figures instead of live ones."""
        self.final = row
        if row.status in FAILED and row.detail:
            self.detail = row.detail
            self._show_note()
        self._show_metrics()

    def show_saved(self, row: ResultRow, baseline: ResultRow | None = None, marks: Sequence[Mark] = ()) -> None:
        """Read-only view of a saved cell, its rejected drafts at ``marks``;
        with ``baseline`` the text shows its difference from the baseline's."""
        text = row.text or ""
        self.text.clear()
        self.text.append(saved_pieces(text, row.text_origin), [m for m in marks if m[0] <= len(text)])
        against = baseline.text if baseline is not None and row.text is not None else None
        self.baseline_arm = baseline.arm if baseline is not None and against is not None else ""
        differs = against is not None and against != row.text
        if against is not None:
            self.query_one(DiffCaption).update(diff_caption(row.text or "", against, self.baseline_arm))
        if differs:
            assert against is not None
            self.query_one(CellDiff).show(row.text or "", against)
        self._show_diff(against is not None, differs)
        self.cell_label = f"{row.prompt} r{row.round}"
        self.status = row.status
        self.detail = row.detail
        self._show_badge()
        self._show_note()
        self.apply_result(row)

    # -- text -------------------------------------------------------------------
    def _status_text(self) -> str:
        word = self.shown_status()
        if word == "waiting":
            return f"waiting for the {self.waiting}"
        extra = f" · {self.phase}" if self.phase and self.status == Status.LOADING else ""
        where = f"  [dim]{self.cell_label}[/dim]" if self.cell_label else ""
        return f"{word}{extra}{where}"

    def _metrics_text(self) -> Content:
        # Assembled, not markup: this is built a few times a second per
        # lane and parsing markup was a visible share of a frame.
        m, r = self.metrics, self.final
        mem = m.mem_bytes if m else None
        peak = m.peak_mem_bytes if m else None
        if r is not None and r.ok:
            tps = r.tok_per_s
            acc, length = r.acceptance_rate, r.mean_accepted_len
            draft_ms = r.draft_s * 1000 if r.draft_s is not None else None
            verify_ms = r.verify_s * 1000 if r.verify_s is not None else None
            peak = r.peak_mem_bytes or peak
            timing = "mean"
        elif m is not None:
            tps, acc, length = m.tok_per_s, m.acceptance_rate, m.mean_accepted_len
            draft_ms, verify_ms = m.last_draft_ms, m.last_verify_ms
            timing = "last"
        else:
            tps = acc = length = draft_ms = verify_ms = None
            timing = "last"
        rate = Content.assemble("tok/s ", (number(tps), "bold"))
        memory = f"mem {mib_from_bytes(mem)} · peak {mib_from_bytes(peak)}"
        accept = f"accept {percent(acc, '.0f')} · {number(length, '.2f')} tok/step"
        step = f"{timing} draft {milliseconds(draft_ms)} · verify {milliseconds(verify_ms)}"
        if not self.compact and cell_len(step) > self.size.width - 4 > 0:
            step = f"draft {milliseconds(draft_ms)} · verify {milliseconds(verify_ms)}"  # "last"/"mean": see help
        latency = self._latency_text()
        gpu = self._gpu_text()
        if self.compact:
            # a lane alone has the width: the figures on two or three lines
            if self.speculative:
                lines = [Content.assemble(rate, f" · {accept}"), Content(f"{step} · {memory}"),
                         Content(latency + (f" · {gpu}" if gpu else ""))]
            else:
                lines = [Content.assemble(rate, f" · {memory}"), Content(latency + (f" · {gpu}" if gpu else ""))]
        else:
            # side by side, every lane has the same lines (a baseline's
            # speculative ones blank), so their figures line up
            lines = [rate, Content(accept if self.speculative else ""), Content(step if self.speculative else ""),
                     Content(memory), Content(latency)] + ([Content(gpu)] if gpu else [])
        return Content("\n").join(lines)

    def _latency_text(self) -> str:
        """TTFT and inter-token gaps, the report's figures, once the cell
        finished (rows of runs saved before they were measured have none);
        while it runs, how long after its start the first token landed."""
        r, m = self.final, self.metrics
        if r is None:
            first = m.ttft_s if m is not None else None
            return f"first token after {ms_from_s(first, unit=True)}"
        if not r.ok:
            return "ttft —"
        ttft = f"ttft {ms_from_s(r.ttft_s, unit=True)}"
        rehearsal = (r.engine_report or {}).get("rehearsal_s")
        if isinstance(rehearsal, (int, float)) and rehearsal > 0:
            ttft += f" (+{rehearsal:.1f} s rehearsal)"
        p50 = ms_from_s(r.itl_p50_s, unit=True)
        if not self.speculative or r.itl_p95_s is None:
            return f"{ttft} · itl p50 {p50}"
        # tokens landing in a burst of accepted drafts have no gap: the
        # median alone would read 0 ms, the tail says what a step costs
        return f"{ttft} · itl p50 {p50} · p95 {ms_from_s(r.itl_p95_s, unit=True)}"

    def _gpu_text(self) -> str:
        """The latest GPU reading of this arm: its processes' memory (else
        the card's), the card's total, utilization and power."""
        g = self.gpu
        if g is None:
            return ""
        used = g.process_bytes if g.process_bytes is not None else g.card_used_bytes
        util = "—" if g.utilization_pct is None else f"{g.utilization_pct:.0f}%"
        power = "—" if g.power_w is None else f"{g.power_w:.0f} W"
        return f"gpu {used / 2**30:.1f}/{g.card_total_bytes / 2**30:.0f} GiB · util {util} · {power}"
