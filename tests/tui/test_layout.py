"""What a person sees at common terminal sizes, read off the rendered
screen: the run header and the footer, every lane (side by side) or the lane
switcher naming every arm, the arm and prompt columns, one line per table
row, and the best and worst rows without scrolling. Also the probe phase,
the paused badge, the export dialog's default and its refusal of a blank
name, and the smaller promises (one name per view, running cells, the
palette, the plugins' options, whole-number plot axes)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable, ClassVar, Sequence

import pytest

from lab.analysis.run import summarize
from lab.api import Backend, Probing
from lab.hookspecs import hookimpl
from lab.registry import load_registry
from lab.store import load_run
from lab.telemetry import bandwidth
from lab.tui.app import LabApp
from lab.tui.screens.export import ExportScreen
from lab.tui.screens.plugins import PluginsScreen
from lab.tui.screens.run import TABS, RunScreen
from lab.tui.widgets.comparison import ComparisonTable, VerdictLine
from lab.tui.widgets.lane import StatusBadge
from lab.tui.widgets.plots import count_ticks
from tests.fakes import FakeBackend, fake_plugin, fake_registry, profile_toml
from tests.tui.helpers import run_finished, wait_until

pytestmark = pytest.mark.anyio

# four arms, one of them a sweep of two: a lane group and two lone lanes
FOUR_ARMS = """
[[arms]]
name = "base"
backend = "fake"
options = { virtual_clock = true }

[[arms]]
name = "spec"
backend = "fake"
n_max = [2, 4]
options = { speculative = true, accepted = [4, 2, 0], virtual_clock = true }

[[arms]]
name = "costly"
backend = "fake"
n_max = 3
options = { speculative = true, accepted = [0, 1], virtual_clock = true, virtual_draft_s = 0.02 }
"""
ARM_NAMES = ("base", "spec-nmax2", "spec-nmax4", "costly")
PROMPTS = ("prose", "code", "chat")


def screen_lines(app: LabApp) -> list[str]:
    return [strip.text for strip in app.screen._compositor.render_strips()]


def _app(tmp_path: Path, arms: str = FOUR_ARMS, registry: Any = None, **kw: Any) -> LabApp:
    path = tmp_path / "profile.toml"
    path.write_text(profile_toml(arms, name="layout", **kw), encoding="utf-8")
    return LabApp(str(path), registry=registry or fake_registry(), runs_dir=tmp_path / "runs")


async def _dismiss_errors(pilot: Any) -> None:
    while type(pilot.app.screen).__name__ == "ErrorScreen":
        await pilot.press("escape")
        await pilot.pause()


def _row_line(lines: Sequence[str], arm: str, prompt: str) -> str | None:
    """The screen line of the table row of ``arm`` x ``prompt``, if shown."""
    for line in lines:
        words = line.split()
        if len(words) >= 2 and words[0] == arm and words[1] == prompt:
            return line
    return None


@pytest.mark.parametrize("size", [(100, 30), (120, 40), (160, 48)], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_the_main_screen_fits(tmp_path: Path, size: tuple[int, int]) -> None:
    app = _app(tmp_path, prompts=PROMPTS)
    async with app.run_test(size=size) as pilot:
        screen = app.screen
        assert isinstance(screen, RunScreen)
        # the footer composes its keys a frame after the bindings are known
        await wait_until(pilot, lambda: "q Quit" in screen_lines(app)[-1], what="the footer's keys")
        lines = screen_lines(app)
        assert len(lines) == size[1]
        # before the run: the header says what to do, the footer how
        assert any("layout" in line and "press s to start" in line for line in lines[:3]), lines[:3]
        assert "q Quit" in lines[-1] and "s Start" in lines[-1]

        await pilot.press("s")
        await run_finished(pilot)
        await _dismiss_errors(pilot)
        await pilot.pause()
        lines = screen_lines(app)
        text = "\n".join(lines)

        # the run header (profile, state) near the top and the whole footer
        top = "\n".join(lines[:3])
        assert "layout" in top and "done" in top, top
        for key in ("Lane", "Export", "Views", "q Quit", "f1 Help"):
            assert key in lines[-1], (key, lines[-1])

        # every lane side by side, or the one shown under a switcher naming all
        tabbed = size[0] < 120 or screen.tabbed
        switcher = next((line for line in lines if line.strip().startswith("lanes ")), None)
        if size[0] < 120:
            assert tabbed and switcher is not None
        if tabbed:
            assert switcher is not None
            for arm in ARM_NAMES:
                assert f"{arm} ok" in switcher, (arm, switcher)
            shown = [a for a in ARM_NAMES if screen.lane(a).display]
            assert shown == [ARM_NAMES[screen.selected]]
        else:
            for arm in ARM_NAMES:
                lane = screen.lane(arm)
                assert lane.region.right <= size[0] and lane.region.width >= 30, (arm, lane.region)
                assert arm in text

        # the table: arm and prompt columns, one line per row
        head = next(line for line in lines if line.split()[:3] == ["arm", "prompt", "status"])
        assert "verdict" in head
        table = screen.query_one(ComparisonTable)
        assert all(table.rows[key].height == 1 for key in table.rows)

        # the best and the worst row in view (speedups from the saved results)
        summaries = [s for s in summarize(load_run(screen.run_dir())["results"]) if s["speedup"] is not None]
        best = max(summaries, key=lambda s: s["speedup"])
        worst = min(summaries, key=lambda s: s["speedup"])
        for s in (best, worst):
            line = _row_line(lines, s["arm"], s["prompt"])
            assert line is not None, f"{s['arm']} x {s['prompt']} not on screen"
            assert f"{s['speedup']:.2f}x" in line
        if size == (160, 48):  # room for every row
            for arm in ARM_NAMES:
                for prompt in PROMPTS:
                    assert _row_line(lines, arm, prompt) is not None, (arm, prompt)

        # the highlighted row's verdict in full under the table
        keys = list(table.rows)
        target = next(i for i, k in enumerate(keys) if str(k.value).startswith("costly"))
        for _ in range(target - table.cursor_row):
            await pilot.press("down")
        await pilot.pause()
        full = next(s["verdict"] for s in summaries if s["arm"] == "costly")
        shown_line = " ".join(str(screen.query_one(VerdictLine).render()).split())
        assert " ".join(full.split()) in shown_line


async def test_the_lane_switcher_shows_one_lane_at_a_time(tmp_path: Path) -> None:
    app = _app(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = app.screen
        await pilot.pause()
        for i in range(len(ARM_NAMES) + 1):
            want = ARM_NAMES[i % len(ARM_NAMES)]
            lines = screen_lines(app)
            switcher = next(line for line in lines if line.strip().startswith("lanes "))
            assert f"▸ {want} " in switcher, (want, switcher)
            # the lane on show is the selected one, the whole width
            lane = screen.lane(want)
            assert lane.display and lane.region.width >= 90
            assert any(want in line and "fake ·" in line for line in lines)
            await pilot.press("right")
            await pilot.pause()


async def test_the_tabs_and_the_footer_name_a_view_alike(tmp_path: Path) -> None:
    app = _app(tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        lines = screen_lines(app)
        strip = next(line for line in lines if "1 Comparison" in line)
        for key, _, title in TABS:
            assert f"{key} {title}" in strip
        assert "Table" not in lines[-1]
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Show comparison (1)" in titles
        # a live run has nothing to go back to: the palette offers no Back,
        # even though the palette itself sits on the stack
        await pilot.press("ctrl+p")
        await pilot.pause(0.2)
        assert not any(t.startswith("Back") for t in (c.title for c in app.get_system_commands(app.screen_stack[-2])))
        await pilot.press("escape")


async def test_a_running_cell_says_running_and_a_paused_lane_says_paused(tmp_path: Path) -> None:
    slow = FOUR_ARMS.replace("options = { virtual_clock = true }", "options = { token_delay_s = 0.02 }")
    app = _app(tmp_path, slow, max_tokens=400, prompts=("prose", "code"))
    async with app.run_test(size=(160, 48)) as pilot:
        screen = app.screen
        await pilot.press("s")
        await wait_until(pilot, lambda: screen.lane("base").text.text != "", what="tokens to land")
        table = screen.query_one(ComparisonTable)
        assert str(table.get_cell("base\x1fprose", "status")) == "running"
        assert str(table.get_cell("base\x1fcode", "status")) == "pending"
        badge = screen.lane("base").query_one(StatusBadge)
        assert str(badge.render()).startswith("running")

        await pilot.press("p")
        await wait_until(pilot, lambda: screen.holding, what="the runner to hold")
        await pilot.pause()
        assert str(badge.render()).startswith("paused"), str(badge.render())
        header = next(line for line in screen_lines(app)[:3] if "layout" in line)
        assert header.count("paused") == 1, header
        assert "p Resume" in screen_lines(app)[-1]

        await pilot.press("p")
        await wait_until(pilot, lambda: not screen.paused, what="resume")
        await wait_until(pilot, lambda: str(badge.render()).startswith(("running", "ok")), what="the badge to go on")
        await pilot.press("x")
        await run_finished(pilot)


@pytest.mark.slow
async def test_export_defaults_to_markdown_and_refuses_a_blank_name(tmp_path: Path) -> None:
    app = _app(tmp_path, prompts=("prose",))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        await pilot.press("s")
        await run_finished(pilot)
        await _dismiss_errors(pilot)
        run_dir = screen.run_dir()
        export = run_dir / "export.md"

        # e, space, enter: the obvious default, Markdown beside the run's files under a new name
        await pilot.press("e")
        await wait_until(pilot, lambda: isinstance(app.screen, ExportScreen))
        await pilot.press("space", "enter")
        await wait_until(pilot, lambda: app.screen is screen, what="the dialog to close")
        await wait_until(pilot, export.exists, what="the export")
        assert export.read_text(encoding="utf-8").startswith("#")
        assert not (Path.cwd() / " ").exists()

        # e, down, enter: the next format, CSV
        await pilot.press("e")
        await wait_until(pilot, lambda: isinstance(app.screen, ExportScreen))
        await pilot.press("down", "enter")
        await wait_until(pilot, lambda: app.screen is screen, what="the dialog to close")
        await wait_until(pilot, (run_dir / "export.csv").exists, what="the CSV export")
        assert (run_dir / "export.csv").read_text(encoding="utf-8").startswith("arm,")

        # the next Markdown export takes the next free name
        await pilot.press("e")
        await wait_until(pilot, lambda: isinstance(app.screen, ExportScreen))
        assert app.screen.query_one("#export-path").value == str(run_dir / "export-2.md")
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is screen)

        # a blank name is refused in the dialog, with a message
        for blank in ("", "   ", str(run_dir) + "/ ", str(run_dir) + "/"):
            await pilot.press("e")
            await wait_until(pilot, lambda: isinstance(app.screen, ExportScreen))
            dialog = app.screen
            dialog.query_one("#export-path").value = blank
            await pilot.press("tab")  # into the path field
            await pilot.press("enter")
            await pilot.pause()
            assert app.screen is dialog, f"{blank!r} was taken"
            problem = str(dialog.query_one("#export-problem").render())
            assert problem.strip(), f"no message for {blank!r}"
            await pilot.press("escape")
            await wait_until(pilot, lambda: app.screen is screen)
        assert not (run_dir / " ").exists()


class GatedProbing(FakeBackend, Probing):
    """The fake stream, with a verify-cost measurement that waits for the
    test to let it go (a long probe, as on a real model)."""

    name = "fake-gated"
    probe_methods = ("scripted",)
    gate: ClassVar[threading.Event] = threading.Event()
    started: ClassVar[threading.Event] = threading.Event()

    def measure_verify_cost(self, widths: Sequence[int], method: str | None = None) -> list[float]:
        GatedProbing.started.set()
        GatedProbing.gate.wait(20)
        return [0.01 * (1 + 0.25 * (w - 1)) for w in widths]


class _GatedPlugin:
    __name__ = "tests.tui.test_layout"

    @hookimpl
    def lab_register_backends(self, register: Callable[[type[Backend]], None]) -> None:
        register(GatedProbing)


PROBED = """
[[arms]]
name = "base"
backend = "fake-gated"
options = { virtual_clock = true }

[[arms]]
name = "spec"
backend = "fake-gated"
n_max = 3
options = { speculative = true, virtual_clock = true }
"""


@pytest.fixture
def gated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("LAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(bandwidth, "_measure", lambda threads: (5e9, "fixed for the test"))
    GatedProbing.gate.clear()
    GatedProbing.started.clear()
    yield load_registry(extra_plugins=[fake_plugin, _GatedPlugin()])
    GatedProbing.gate.set()


@pytest.mark.slow
async def test_the_probe_is_a_phase_of_its_own(tmp_path: Path, gated: Any) -> None:
    app = _app(tmp_path, PROBED, registry=gated)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = app.screen
        await pilot.press("s")
        await wait_until(pilot, lambda: screen.probing is not None, what="the probe to start")
        await pilot.pause()
        lines = screen_lines(app)
        probe = next((line for line in lines if "probe" in line and "measuring" in line), None)
        assert probe is not None, lines
        assert "probing" in "\n".join(lines[:3])
        assert "pending" not in next(line for line in lines if line.strip().startswith("lanes "))
        assert str(screen.lane("base").query_one(StatusBadge).render()).startswith("waiting for the probe")

        GatedProbing.gate.set()
        await run_finished(pilot)
        await _dismiss_errors(pilot)
        lines = screen_lines(app)
        assert not any("measuring" in line for line in lines)
        assert screen.lane("spec").status.value == "ok"


async def test_quitting_during_the_probe_keeps_the_screen_live(tmp_path: Path, gated: Any) -> None:
    app = _app(tmp_path, PROBED, registry=gated)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = app.screen
        await pilot.press("s")
        await wait_until(pilot, lambda: GatedProbing.started.is_set() and screen.probing is not None,
                         what="the probe to measure")
        quitting = app.run_action("quit")
        import asyncio

        task = asyncio.ensure_future(quitting)
        # the measurement holds the runner; the screen still answers
        await wait_until(pilot, lambda: screen.stopping, what="the header to say stopping")
        for _ in range(3):
            await pilot.pause(0.05)
        assert "stopping" in "\n".join(screen_lines(app)[:3])
        assert not task.done()
        GatedProbing.gate.set()
        await asyncio.wait_for(task, 20)
    rows = load_run(next((tmp_path / "runs").iterdir()))["results"]
    assert {r["status"] for r in rows} == {"cancelled"}  # no arm ran after the quit
    assert not app.active_session()


async def test_the_plugins_screen_describes_every_option(tmp_path: Path) -> None:
    app = _app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("f2")
        await wait_until(pilot, lambda: isinstance(app.screen, PluginsScreen))
        plugins = app.screen
        table = plugins.query_one("#backends")
        keys = [str(k.value) for k in table.rows]
        for _ in range(keys.index("fake")):
            await pilot.press("down")
        await pilot.pause()
        detail = str(plugins.query_one("#backend-options").render())
        for option in FakeBackend.options:
            assert option.describe() in " ".join(detail.split()) or option.describe() in detail, option.name


def test_count_axes_tick_whole_numbers() -> None:
    for top in (1, 3, 5, 7, 12, 99, 1234):
        ticks = count_ticks(top)
        assert all(isinstance(t, int) for t in ticks)
        assert ticks[0] == 0 and ticks[-1] >= top and len(ticks) <= 6
        steps = {b - a for a, b in zip(ticks, ticks[1:])}
        assert len(steps) == 1
