"""The run screen: lanes side by side, the comparison filling in, plots.

Nothing scrolls off: below TABBED_BELOW columns (or lanes narrower than
LANE_MIN) one lane shows under a lane switcher. Live it renders a
RunSession's messages and rows; read-only, a saved run directory. What needs
the app it asks for with a message."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, HorizontalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Header, ProgressBar, Static, TabbedContent, TabPane, Tabs

from lab.base.events import Status
from lab.base.profile import Arm, Profile
from lab.base.row import ResultRow
from lab.tui.messages import (
    ArmMetricsUpdated,
    ArmStatusChanged,
    CellFinished,
    EnginesMissing,
    GpuSampledLive,
    PauseChanged,
    ProbeProgress,
    RunBegan,
    RunEnded,
    RunFailed,
    TokensLanded,
)
from lab.tui.series import ArmSeries, series_from_saved
from lab.tui.widgets.comparison import ComparisonTable, VerdictLine
from lab.tui.widgets.footer import LabFooter
from lab.tui.widgets.lane import ArmLane, lane_id, saved_marks
from lab.tui.widgets.plots import ArmPlots

if TYPE_CHECKING:
    from lab.profile.engines import EngineProblem
    from lab.tui.session import RunSession

try:
    # per-category figures: a tab of their own when the widget is there
    from lab.tui.widgets.categories import CategoryTable
except ImportError:  # pragma: no cover - an install without it
    CategoryTable = None  # type: ignore[assignment,misc]

# the bottom tabs switch by number; the arrow keys always move between lanes
TABS = (("1", "tab-comparison", "Comparison"), ("2", "tab-plots", "Plots"), ("3", "tab-categories", "Categories"))
TAB_KEYS = Binding.Group("Views", compact=False)

FAILURES = (Status.OOM, Status.CRASHED, Status.ERROR)
LANE_MIN = 30
TABBED_BELOW = 120  # columns: narrower, one lane at a time
TITLE_BAR_FROM = 36  # rows: lower, the app's title bar gives its line to the lanes
LANES_MIN = 14  # rows the lanes keep side by side (title, status, text, figures)
LANES_MIN_TABBED = 9  # a compact lane: a title line, two of figures
BOTTOM_MIN = 8
BOTTOM_PLOTS = 16  # the plots and categories tabs want this much, where there is room
# the bottom pane around its table rows: the tab strip (2), the table's
# header (1) and the full verdict line under it (up to 2)
BOTTOM_CHROME = 5
STATUS_STYLE = {
    "pending": "dim", "waiting": "dim", "loading": "yellow", "warmup": "yellow", "running": "bold",
    "pausing": "bold yellow", "paused": "bold yellow", "ok": "green", "oom": "red", "crashed": "red",
    "error": "red", "cancelled": "dim", "skipped": "dim",
}


class RunHeader(Static):
    """Profile, current arm, prompt and round, run state, run directory."""


class LaneGroup(Horizontal):
    """The lanes of one sweep (one profile entry expanded into several arms)."""


class ProbeText(Static):
    """What the probe phase is doing or found."""


class ProbeLine(Horizontal):
    """The probe phase on its own line: what it measures, for how long, and
    an indeterminate bar (the runner reports each stack's start and end,
    nothing in between)."""

    def compose(self) -> ComposeResult:
        yield ProbeText("")
        yield ProgressBar(total=None, show_eta=False, show_percentage=False, id="probe-bar")


class LaneSwitcher(Static):
    """One lane at a time: every arm, its status, the one shown marked."""


def switcher_line(lanes: Sequence[tuple[str, str]], selected: int, running: str | None, width: int) -> Text:
    """The lane switcher on one line of ``width``: keys first (never cut),
    then the arms, shortened around the selected one where too long."""
    head = Text.assemble(("lanes ", "dim"), ("← →", "bold"), ("  ", ""))

    def piece(i: int, full: bool) -> Text:
        name, status = lanes[i]
        style = STATUS_STYLE.get(status, "")
        if full or i == selected or name == running or status in ("oom", "crashed", "error"):
            out = Text.assemble((name, "bold"), " ", (status, style))
        else:
            out = Text(name, style=style or "bold")
        if i == selected:
            out = Text.assemble(("▸ ", "bold"), out)
            out.stylize("reverse")
        return out

    for full in (True, False):
        line = head.copy()
        for i in range(len(lanes)):
            line.append_text(piece(i, full))
            line.append("  ")
        line.rstrip()
        if line.cell_len <= width:
            return line
    # a window around the selected arm, widened one arm at a time
    lo = hi = selected
    pieces = {i: piece(i, False) for i in range(len(lanes))}

    def window(a: int, b: int) -> Text:
        line = head.copy()
        if a > 0:
            line.append("… ", style="dim")
        for i in range(a, b + 1):
            line.append_text(pieces[i])
            if i < b:
                line.append("  ")
        if b < len(lanes) - 1:
            line.append(" …", style="dim")
        return line

    best = window(lo, hi)
    while lo > 0 or hi < len(lanes) - 1:
        grown = False
        for a, b in ((lo, hi + 1), (lo - 1, hi)):
            if 0 <= a and b < len(lanes) and window(a, b).cell_len <= width:
                lo, hi, grown = a, b, True
                best = window(lo, hi)
                break
        if not grown:
            break
    best.truncate(width, overflow="ellipsis")
    return best


def arms_from_saved(data: Mapping[str, Any]) -> list[Arm]:
    names = {f.name for f in fields(Arm)}
    return [Arm(**{k: v for k, v in a.items() if k in names}) for a in data["profile"].get("arms", [])]


class RunScreen(Screen[None]):
    @dataclass
    class StartRequested(Message):
        """Start a run of ``screen``'s profile (the app owns the worker)."""

        screen: RunScreen

    @dataclass
    class SaveRequested(Message):
        screen: RunScreen

    @dataclass
    class ExportRequested(Message):
        screen: RunScreen

    @dataclass
    class FailureSeen(Message):
        """An arm failed: the app shows ``detail`` in a modal."""

        title: str
        detail: str

    BINDINGS = [
        # priority: the arrows mean "lane" whatever has focus (the tab
        # strip and the tables would otherwise take them)
        Binding("left", "select(-1)", "Lane", priority=True, key_display="← →"),
        Binding("right", "select(1)", "→ lane", priority=True, show=False),
        Binding("s", "start", "Start"),
        # one key, two meanings: the footer offers the one that applies
        Binding("p", "pause", "Pause"),
        Binding("p", "resume", "Resume"),
        Binding("c", "cancel_arm", "Cancel", tooltip="Cancel the selected arm"),
        Binding("n", "next_arm", "Skip", tooltip="Skip the running arm, go to the next"),
        Binding("x", "stop", "Stop", tooltip="Stop the run"),
        Binding("w", "save", "Save"),
        Binding("e", "export", "Export"),
        Binding("r", "next_round", "Round", show=False),
        Binding("m", "compare", "Compare", show=False),
        # the tab strip names the views with their keys; the footer groups them
        *(Binding(key, f"show_tab('{tab}')", title, group=TAB_KEYS) for key, tab, title in TABS),
        Binding("a", "select(1)", "Next lane", show=False),
        Binding("escape", "close", "Back", show=False),
        # the app's, kept out of this footer so it fits 100 columns (help and
        # the palette list them)
        Binding("o", "app.open", "Open", show=False),
        Binding("f2", "app.plugins", "Plugins", show=False),
    ]

    def __init__(
        self,
        *,
        name: str,
        arms: Sequence[Arm],
        prompts: Sequence[str],
        rounds: int,
        profile: Profile | None = None,
        saved: Mapping[str, Any] | None = None,
        saved_dir: str | None = None,
        saved_steps: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        super().__init__()
        self.profile_name = name
        self.arms = list(arms)
        self.prompts = list(prompts)
        self.rounds = rounds
        self.profile = profile
        self.saved = saved
        self.saved_dir = saved_dir
        self.saved_steps = list(saved_steps)
        # rejected drafts per cell (arm, prompt, round), to show a finished cell as it streamed
        self.cell_marks = saved_marks(self.saved_steps)
        self.saved_rows = tuple(ResultRow.from_json(r) for r in saved["results"]) if saved is not None else ()
        self.read_only = saved is not None
        self.session: RunSession | None = None
        self.series: dict[str, ArmSeries] = {a.name: ArmSeries.of(a) for a in self.arms}
        self.selected = 0
        self.state = "saved" if self.read_only else "ready"
        self.current = ""
        self.paused = False
        self.holding = False  # the runner waits at the gate now
        self.stopping = False
        self.tabbed = False
        self.active_arm: str | None = None  # the arm the runner is in
        # the selection follows the arm the runner is in, until the user
        # picks another lane (picking the running one follows again)
        self.follow = True
        self.probing: str | None = None  # the stack being measured
        self._probe_t0 = 0.0
        self._probe_lines: list[str] = []
        self._plots_dirty = True
        self._failures_shown: set[str] = set()
        self.viewed: tuple[str, str, int] | None = None  # the cell the lanes show: arm, prompt, round
        self.engine_problems: tuple[EngineProblem, ...] = ()  # engines that cannot load here
        self._highlighted: object = None  # the table row last highlighted

    @classmethod
    def live(cls, profile: Profile) -> RunScreen:
        return cls(name=profile.name, arms=profile.arms, prompts=[p.name for p in profile.prompts],
                   rounds=profile.run.rounds, profile=profile)

    @classmethod
    def from_saved(cls, data: Mapping[str, Any], run_dir: str, steps: Sequence[Mapping[str, Any]]) -> RunScreen:
        prof = data["profile"]
        return cls(name=prof["name"], arms=arms_from_saved(data), prompts=[p["name"] for p in prof.get("prompts", [])],
                   rounds=int(prof.get("run", {}).get("rounds", 1)), saved=data, saved_dir=run_dir, saved_steps=steps)

    def rows(self) -> Sequence[ResultRow]:
        """The rows on show: the live session's (its runner keeps them), or
        the saved run's."""
        return self.session.rows() if self.session is not None else self.saved_rows

    # -- layout ----------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Header()
        yield RunHeader(self._header_text())
        yield ProbeLine(id="probe")
        yield LaneSwitcher("", id="lane-switcher")
        with HorizontalScroll(id="lanes"):
            groups: dict[str, list[Arm]] = {}
            for arm in self.arms:
                groups.setdefault(arm.group, []).append(arm)
            for group, arms in groups.items():
                if len(arms) > 1:
                    with LaneGroup(classes="lane-group") as box:
                        box.border_title = f"sweep {group}"
                        for arm in arms:
                            yield ArmLane(arm)
                else:
                    yield ArmLane(arms[0])
        with TabbedContent(id="bottom"):
            title = {tab: f"{key} {name}" for key, tab, name in TABS}
            with TabPane(title["tab-comparison"], id="tab-comparison"):
                yield ComparisonTable(id="comparison")
                yield VerdictLine(id="verdict-line")
            with TabPane(title["tab-plots"], id="tab-plots"):
                yield ArmPlots(id="plots")
            if CategoryTable is not None:
                with TabPane(title["tab-categories"], id="tab-categories"):
                    yield CategoryTable(id="categories")
        yield LabFooter()

    def on_mount(self) -> None:
        # Tab moves between the tables; tabs switch by 1/2/3, so the tab
        # strip never holds the focus (and with it the arrow keys).
        for tabs in self.query(Tabs):
            tabs.can_focus = False
        table = self.query_one(ComparisonTable)
        table.set_cells([a.name for a in self.arms], self.prompts)
        table.focus()
        self.query_one(ProbeLine).display = False
        self._layout()
        self._select(0)
        self.set_interval(0.25, self._redraw_plots)
        self.set_interval(1.0, self._tick_probe)
        if self.saved is not None:
            self._show_saved()

    def _show_saved(self) -> None:
        assert self.saved is not None
        results = self.saved_rows
        self.query_one(ComparisonTable).show(results)
        self._show_categories()
        for arm in self.arms:
            rows = [r for r in results if r.arm == arm.name]
            if not rows:
                continue
            ok = [r for r in rows if r.ok]
            self._show_row((ok or rows)[-1])
        self.series.update(series_from_saved(self.saved["profile"].get("arms", []), results, self.saved_steps))
        self._plots_dirty = True

    # -- viewing a finished cell ------------------------------------------------
    def _show_row(self, row: ResultRow) -> None:
        marks = self.cell_marks.get((row.arm, row.prompt, row.round), ())
        self.lane(row.arm).show_saved(row, self._baseline_of(row), marks)

    def _baseline_of(self, row: ResultRow) -> ResultRow | None:
        """The baseline's cell of ``row``'s prompt and round (the one its
        text is compared with), None for a baseline or without one."""
        base = row.baseline_arm or next((a.baseline for a in self.arms if a.name == row.arm), None)
        if not base or base == row.arm:
            return None
        return next((r for r in self.rows() if (r.arm, r.prompt, r.round) == (base, row.prompt, row.round)), None)

    def _cell_rounds(self, arm: str, prompt: str) -> list[ResultRow]:
        """The measured rounds of one arm x prompt, in order (warmups aside)."""
        return sorted((r for r in self.rows() if (r.arm, r.prompt) == (arm, prompt) and r.round > 0),
                      key=lambda r: r.round)

    def can_view_cells(self) -> bool:
        """Any finished cell can be looked at once no run is streaming into
        the lanes (a saved run, or a live one that ended)."""
        return self.session is None or not self.session.running

    def view_cell(self, arm: str, prompt: str, round: int | None = None) -> ResultRow | None:
        """Show one cell in its arm's lane (its last ok round unless
        ``round``), with its difference from the baseline's text for the
        same prompt and round, and select that lane."""
        rows = self._cell_rounds(arm, prompt)
        if not rows or not self.can_view_cells():
            return None
        if round is None:
            ok = [r for r in rows if r.ok]
            row = (ok or rows)[-1]
        else:
            row = next((r for r in rows if r.round == round), rows[-1])
        self._show_row(row)
        self.viewed = (arm, prompt, row.round)
        names = [a.name for a in self.arms]
        if arm in names and names.index(arm) != self.selected:
            self._select(names.index(arm))
        return row

    @on(ComparisonTable.RowHighlighted, "#comparison")
    def _row_highlighted(self, event: ComparisonTable.RowHighlighted) -> None:
        key = event.row_key.value
        # a table rebuilt (a cell finished, a resize) highlights its row
        # again: only a move to another row changes what the lanes show
        moved, self._highlighted = key != self._highlighted, key
        if key is None or not moved or not self.can_view_cells():
            return
        arm, _, prompt = str(key).partition("\x1f")
        if self.viewed is None or self.viewed[:2] != (arm, prompt):
            self.view_cell(arm, prompt)

    def action_next_round(self) -> None:
        if self.viewed is None:
            table = self.query_one(ComparisonTable)
            keys = list(table.lines())
            if not keys:
                return
            arm, _, prompt = keys[min(table.cursor_row, len(keys) - 1)].partition("\x1f")
            self.view_cell(arm, prompt)
            return
        arm, prompt, rnd = self.viewed
        rounds = [r.round for r in self._cell_rounds(arm, prompt)]
        if rounds:
            nxt = rounds[(rounds.index(rnd) + 1) % len(rounds)] if rnd in rounds else rounds[0]
            self.view_cell(arm, prompt, nxt)

    def action_compare(self) -> None:
        """Pick another saved run and show both side by side."""
        if self.saved_dir is None and self.run_dir() is None:
            return
        from lab.tui.screens.compare import CompareScreen
        from lab.tui.screens.picker import PickerScreen

        here = str(self.run_dir())
        runs_dir = Path(here).parent

        def picked(choice: tuple[str, str] | None) -> None:
            if choice is None:
                return
            kind, path = choice
            if kind != "run":
                self.notify("pick a saved run to compare with", severity="warning")
                return
            screen = CompareScreen.open(here, path)
            if isinstance(screen, str):
                self.notify(screen, severity="error")
            else:
                self.app.push_screen(screen)

        self.app.push_screen(PickerScreen(runs_dir, runs_dir, runs_only=True,
                                          title=f"Compare {Path(here).name} with a saved run"), picked)

    def on_resize(self) -> None:
        self._layout()

    def _groups(self) -> dict[str, list[Arm]]:
        groups: dict[str, list[Arm]] = {}
        for arm in self.arms:
            groups.setdefault(arm.group, []).append(arm)
        return groups

    def _layout(self) -> None:
        """Fit the screen to the terminal: lanes side by side or one at a
        time (LANE_MIN, TABBED_BELOW); the bottom pane as tall as its rows."""
        width, height = self.size
        if not width or not self.arms:
            return
        swept = [g for g in self._groups().values() if len(g) > 1]
        room = width - 2 * len(swept)
        self.tabbed = width < TABBED_BELOW or room // len(self.arms) < LANE_MIN
        self.set_class(self.tabbed, "-tabbed")
        self.query_one(LaneSwitcher).display = self.tabbed
        self.query_one(Footer).show_command_palette = width >= TABBED_BELOW
        for arm in self.arms:
            lane = self.lane(arm.name)
            lane.set_compact(self.tabbed)
            lane.styles.width = "1fr" if self.tabbed else room // len(self.arms)
        self._show_selected_lane()
        title_bar = height >= TITLE_BAR_FROM
        self.query_one(Header).display = title_bar
        self._update_header()
        fixed = (title_bar + 1 + bool(self.query_one(ProbeLine).display) + self.tabbed
                 + 1)  # the footer
        free = height - fixed
        lanes_min = max(LANES_MIN_TABBED if self.tabbed else LANES_MIN, free * 2 // 5)
        tabs = self.query_one(TabbedContent)
        want = len(self.arms) * len(self.prompts) + BOTTOM_CHROME
        if tabs.active != "tab-comparison":
            want = max(want, BOTTOM_PLOTS)
        tabs.styles.height = max(BOTTOM_MIN, min(want, free - lanes_min))

    def _show_selected_lane(self) -> None:
        """Tabbed, only the selected lane (and its sweep's box) shows."""
        chosen = self.arms[self.selected].name if self.arms else None
        for arm in self.arms:
            self.lane(arm.name).display = not self.tabbed or arm.name == chosen
        for box in self.query(LaneGroup):
            holds = any(isinstance(lane, ArmLane) and lane.arm.name == chosen for lane in box.children)
            box.display = not self.tabbed or holds
            box.styles.width = "1fr" if self.tabbed else "auto"
        self._update_switcher()

    def _update_switcher(self) -> None:
        if not self.tabbed:
            return
        lanes = [(arm.name, self.lane(arm.name).shown_status()) for arm in self.arms]
        width = (self.size.width or self.app.size.width) - 2
        self.query_one(LaneSwitcher).update(switcher_line(lanes, self.selected, self.active_arm, width))

    def lane(self, arm: str) -> ArmLane:
        return self.query_one(f"#{lane_id(arm)}", ArmLane)

    def _show_categories(self) -> None:
        if CategoryTable is not None:
            self.query_one(CategoryTable).show_rows(self.rows())

    def _header_text(self) -> str:
        """The run header (markup) on one line of the screen's width: the run
        directory gives way first, then the cadence's reason, the counts,
        and last the line is cut with "…"."""
        state = self.state
        if self.stopping and self.state in ("starting", "running"):
            state = "stopping (closing the engine)"
        elif self.paused:
            state = "paused (p resumes)" if self.holding else "pausing at the next step"
        elif self.probing is not None and self.state == "running":
            state = "probing"
        if self.state == "ready":
            state = "ready: press s to start"
        if self.engine_problems and self.state in ("ready", "refused"):
            engines = ", ".join(dict.fromkeys(p.engine for p in self.engine_problems))
            state = f"cannot run: {engines} missing (s checks again)"
        reason = ""
        if self.session is not None and self.session.running:
            reason = self.session.cadence.reason
        name = f"[b]{self.profile_name}[/b]" + (" [reverse] read-only [/reverse]" if self.read_only else "")
        counts = f"  {len(self.arms)} arms × {len(self.prompts)} prompts × {self.rounds} rounds"
        where = f"  [b]{self.current}[/b]" if self.current else ""
        run_dir = self.session.run_dir if self.session is not None else self.saved_dir
        out = f"  [dim]→ {run_dir}[/dim]" if run_dir else ""
        full = f" [dim]({reason})[/dim]" if reason else ""
        short = f" [dim]({reason.split(':')[0]})[/dim]" if reason else ""
        variants = (
            f"{name}{counts}  · {state}{full}{where}{out}",
            f"{name}{counts}  · {state}{full}{where}",
            f"{name}{counts}  · {state}{short}{where}",
            f"{name}  · {state}{short}{where}",
            f"{name}  · {state}{where}",
        )
        room = max(1, (self.size.width or self.app.size.width) - 2)
        for markup in variants:
            text = Text.from_markup(markup)
            if text.cell_len <= room:
                return markup
        text.truncate(room, overflow="ellipsis")
        return text.markup

    def _update_header(self) -> None:
        # one line always: no layout for a new header
        self.query_one(RunHeader).update(self._header_text(), layout=False)

    # -- live messages -----------------------------------------------------------
    def on_run_began(self, message: RunBegan) -> None:
        self.state = "running"
        self._update_header()

    def on_tokens_landed(self, message: TokensLanded) -> None:
        cell = message.cell
        lane = self.lane(cell.arm)
        if message.rejected and not cell.is_warmup:
            into = lane.text.drafted_chars + lane.text.target_chars
            marks = self.cell_marks.setdefault((cell.arm, cell.prompt, cell.round), [])
            marks.extend((into + at, n) for at, n in message.rejected)
        lane.add_text(message.segments, message.rejected)
        series = self.series.get(cell.arm)
        if series is not None and not cell.is_warmup:
            series.add_steps(message.steps)
            if message.rate is not None:
                series.add_rate((cell.prompt, cell.round), message.rate)
            self._plots_dirty = True

    def on_gpu_sampled_live(self, message: GpuSampledLive) -> None:
        if message.reading.arm in self.series:
            self.lane(message.reading.arm).set_gpu(message.reading)

    def on_arm_metrics_updated(self, message: ArmMetricsUpdated) -> None:
        self.lane(message.metrics.arm).set_metrics(message.metrics)

    def on_arm_status_changed(self, message: ArmStatusChanged) -> None:
        event = message.event
        cell = event.cell
        if cell.round < 0 and event.status == Status.LOADING and (self.probing is not None or self._probe_lines):
            self._end_probe()
        self.lane(event.cell.arm).set_status(event)
        if cell.round >= 0 and event.status in (Status.RUNNING, Status.WARMUP):
            rnd = "warmup" if cell.round == 0 else f"round {cell.round}/{self.rounds}"
            self.current = f"{cell.arm} · {cell.prompt} · {rnd}"
            self.query_one(ComparisonTable).set_status(cell.arm, cell.prompt, event.status.value)
        elif cell.round < 0 and event.status == Status.LOADING:
            self.current = f"{cell.arm} · {event.phase or 'loading'}"
        if event.status in (Status.LOADING, Status.RUNNING, Status.WARMUP):
            if self.active_arm != cell.arm and self.active_arm is not None:
                self.lane(self.active_arm).set_held("")
            self.active_arm = cell.arm
            names = [a.name for a in self.arms]
            if self.follow and cell.arm in names and names.index(cell.arm) != self.selected:
                self._select(names.index(cell.arm))
        elif cell.round < 0 and event.status.is_final and self.active_arm == cell.arm:
            self.lane(cell.arm).set_held("")
            self.active_arm = None
        self._update_header()
        self._update_switcher()

    # -- the probe phase -------------------------------------------------------------
    def on_probe_progress(self, message: ProbeProgress) -> None:
        line = self.query_one(ProbeLine)
        where = f" {message.stack}" if message.stack else ""
        if not message.done:
            self.probing = message.stack or "probe"
            self._probe_t0 = time.monotonic()
            text = f"[b]probe{where}[/b] measuring {message.text}"
            for arm in self.arms:
                self.lane(arm.name).set_waiting("probe")
        else:
            self.probing = None
            text = f"[b]probe{where}[/b] {message.text}"
        self._probe_lines.append(text)
        line.query_one(ProgressBar).display = not message.done
        if not line.display:
            line.display = True
            self._layout()
        self._show_probe()
        self._update_header()
        self._update_switcher()

    def _show_probe(self) -> None:
        if not self._probe_lines:
            return
        text = self._probe_lines[-1]
        if self.probing is not None:
            text += f" [dim]· {time.monotonic() - self._probe_t0:.0f} s (the arms wait; q or x ends it at once)[/dim]"
        self.query_one(ProbeText).update(text)

    def _tick_probe(self) -> None:
        if self.probing is not None:
            self._show_probe()

    def _end_probe(self) -> None:
        """The first arm loads: the probe phase is over (its lines are in
        the run's report)."""
        self.probing = None
        self._probe_lines.clear()
        for arm in self.arms:
            self.lane(arm.name).set_waiting("")
        line = self.query_one(ProbeLine)
        if line.display:
            line.display = False
            self._layout()

    def on_cell_finished(self, message: CellFinished) -> None:
        row = message.row
        self.query_one(ComparisonTable).show([r for r in self.rows() if (r.arm, r.prompt) == (row.arm, row.prompt)])
        self.lane(row.arm).apply_result(row)
        self._show_categories()
        if row.status in FAILURES and row.arm not in self._failures_shown:
            self._failures_shown.add(row.arm)
            self.post_message(self.FailureSeen(f"{row.arm}: {row.status.value}", row.detail or "(no detail)"))
        self._plots_dirty = True

    def on_pause_changed(self, message: PauseChanged) -> None:
        self.paused = message.paused
        self.holding = message.holding
        if self.active_arm is not None:
            self.lane(self.active_arm).set_held(
                ("paused" if self.holding else "pausing") if self.paused else "")
        self._update_header()
        self._update_switcher()
        self.refresh_bindings()

    def on_run_ended(self, message: RunEnded) -> None:
        self.state = "cancelled" if message.cancelled else "done"
        self.current = ""
        self.paused = self.holding = self.stopping = False
        self._end_probe()
        for arm in self.arms:
            self.lane(arm.name).set_held("")
        self.active_arm = None
        self._update_header()
        self._update_switcher()
        self.refresh_bindings()

    def on_engines_missing(self, message: EnginesMissing) -> None:
        """Arms whose engine cannot load: each lane says what is missing and
        how to install it, the header says the run cannot start, the app
        shows every problem; nothing ran."""
        self.engine_problems = message.problems
        if self.session is not None and not self.session.running:
            self.state = "refused"
        names = {arm for p in message.problems for arm in p.arms}
        for arm in self.arms:
            problem = next((p for p in message.problems if arm.name in p.arms), None)
            if problem is None:
                self.lane(arm.name).set_problem("")
                continue
            fix = f" · install: {problem.install}" if problem.install else ""
            self.lane(arm.name).set_problem(f"{problem.engine} cannot load: {problem.why}{fix}")
        self._update_header()
        self.refresh_bindings()
        detail = "\n".join(p.line() for p in message.problems)
        self.post_message(self.FailureSeen(
            f"cannot run: {len(names)} arm{'s need' if len(names) != 1 else ' needs'} an engine that cannot load",
            f"{detail}\n\nNothing was run. Install what is missing and press s again."))

    def on_run_failed(self, message: RunFailed) -> None:
        self.state = "failed"
        self._update_header()
        self.refresh_bindings()

    # -- plots -----------------------------------------------------------------
    def _base_tok_per_s(self, arm: Arm) -> float | None:
        if arm.baseline is None:
            return None
        tps = [r.tok_per_s for r in self.rows() if r.arm == arm.baseline and r.ok and r.tok_per_s]
        return statistics.median(tps) if tps else None

    def _redraw_plots(self, force: bool = False) -> None:
        if not (self._plots_dirty or force):
            return
        if self.query_one(TabbedContent).active != "tab-plots" and not force:
            return
        self._plots_dirty = False
        arm = self.arms[self.selected] if self.arms else None
        self.query_one(ArmPlots).draw(
            arm.name if arm else None, self.series.get(arm.name) if arm else None,
            self._base_tok_per_s(arm) if arm else None,
        )

    @on(TabbedContent.TabActivated)
    def _tab_activated(self) -> None:
        self._layout()
        self._redraw_plots(force=True)
        # the view just shown takes the focus (↑ ↓ work at once in its table)
        pane = self.query_one(TabbedContent).active_pane
        target = next((w for w in pane.query("*") if w.focusable), None) if pane is not None else None
        if target is not None:
            target.focus()

    # -- actions ---------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        live_only = {"start", "pause", "resume", "cancel_arm", "next_arm", "stop"}
        if action in live_only and self.read_only:
            return False
        running = self.session is not None and self.session.running
        if action == "start":
            return not running
        if action in ("pause", "resume"):
            # hidden, not greyed: only one of the two shows at a time
            held = running and self.session is not None and self.session.bridge.paused
            return running and held == (action == "resume")
        if action in ("cancel_arm", "next_arm", "stop"):
            return True if running else None
        if action == "show_tab":
            return bool(parameters) and bool(self.query(f"#{parameters[0]}"))
        if action == "next_round":
            return self.can_view_cells() and bool(self.rows())
        if action == "compare":
            return self.can_view_cells() and self.run_dir() is not None and bool(self.rows())
        if action == "close":
            # a saved run opened over another screen (the command palette
            # on top does not count)
            stack = self.app.screen_stack
            return self.read_only and self in stack and stack.index(self) >= 2
        return True

    def action_start(self) -> None:
        if self.profile is None or self.read_only:
            return
        if self.session is not None and self.session.running:
            return
        self.post_message(self.StartRequested(self))

    def attach(self, session: RunSession) -> None:
        """The app started ``session`` for this screen: show it from empty
        lanes and table."""
        if self.session is not None:
            self._reset_for_run()
        self.session = session
        self.viewed = None
        self.state = "starting"
        # the session checks the engines again before it runs anything
        self.engine_problems = ()
        for arm in self.arms:
            self.lane(arm.name).set_problem("")
        self.stopping = False
        self._failures_shown.clear()
        self._update_header()
        self.refresh_bindings()

    def _reset_for_run(self) -> None:
        """A new run of the same profile starts from empty lanes and table."""
        self.query_one(ComparisonTable).set_cells([a.name for a in self.arms], self.prompts)
        self._end_probe()
        self.paused = self.holding = False
        self.active_arm = None
        self.follow = True
        self.cell_marks = {}
        for arm in self.arms:
            self.series[arm.name] = ArmSeries.of(arm)
            lane = self.lane(arm.name)
            lane.set_held("")
            lane.text.clear()
            lane.clear_viewed()
            lane.metrics = lane.final = None
        self._plots_dirty = True

    def action_pause(self) -> None:
        if self.session is None or not self.session.running:
            return
        bridge = self.session.bridge
        if bridge.paused:
            self.action_resume()
            return
        bridge.pause()
        self.notify("pausing at the next step (in-process engines; the held time is not measured) "
                    "or before the next cell (servers); p resumes")
        self.refresh_bindings()

    def action_resume(self) -> None:
        if self.session is None or not self.session.running or not self.session.bridge.paused:
            return
        self.session.bridge.resume()
        self.notify("resumed")
        self.refresh_bindings()

    def action_show_tab(self, tab: str) -> None:
        tabs = self.query_one(TabbedContent)
        if tabs.query(f"#{tab}"):
            tabs.active = tab

    def action_cancel_arm(self) -> None:
        if self.session is None or not self.session.running:
            return
        arm = self.arms[self.selected].name
        self.session.bridge.cancel_arm(arm)
        self.notify(f"cancelling {arm}")

    def action_next_arm(self) -> None:
        if self.session is None or not self.session.running:
            return
        self.session.bridge.skip_arm()
        self.notify("skipping to the next arm")

    def action_stop(self) -> None:
        if self.session is None or not self.session.running:
            return
        self.session.bridge.cancel()
        self.notify("stopping the run" + (" once the probe's measurement ends" if self.probing else ""))

    def mark_stopping(self) -> None:
        """The app is stopping the run (quit): the header says so."""
        if self.session is not None and self.session.running:
            self.stopping = True
            self._update_header()

    def action_select(self, delta: int) -> None:
        if self.arms:
            self._pick((self.selected + delta) % len(self.arms))

    def _pick(self, index: int) -> None:
        """The user chose a lane: the selection stops following the run,
        unless the lane is the running arm's."""
        self.follow = self.active_arm is None or self.arms[index].name == self.active_arm
        self._select(index)

    def _select(self, index: int) -> None:
        for i, arm in enumerate(self.arms):
            self.lane(arm.name).set_class(i == index, "-selected")
        self.selected = index
        self._show_selected_lane()
        if self.arms:
            self.query_one("#lanes", HorizontalScroll).scroll_to_widget(self.lane(self.arms[index].name), animate=False)
        self._plots_dirty = True
        self._redraw_plots()

    def on_click(self, event: Any) -> None:
        widget = event.widget
        while widget is not None and not isinstance(widget, ArmLane):
            widget = widget.parent
        if isinstance(widget, ArmLane):
            self._pick(self.arms.index(widget.arm))

    def run_dir(self) -> Path | None:
        if self.session is not None and self.session.run_dir is not None:
            return self.session.run_dir
        return Path(self.saved_dir) if self.saved_dir else None

    def action_save(self) -> None:
        self.post_message(self.SaveRequested(self))

    def action_export(self) -> None:
        self.post_message(self.ExportRequested(self))

    def action_close(self) -> None:
        if len(self.app.screen_stack) > 2:
            self.dismiss()
