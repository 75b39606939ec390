"""The run screen from 80x24 up, read off the rendered screen as a person
sees it: Quit and Help always in the footer, the run header one line in
every state, the lane switcher's keys whole, every plot's title, the
table's columns giving way in their stated order, the focus where the
arrow keys work; lanes that follow the running arm, mark rejected drafts
with an on-screen legend and name the unit of every figure; the export
dialog's marks told apart without colour; `lab RUN_DIR`."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Callable, Mapping

import pytest
from rich.text import Text
from textual.app import App, ComposeResult

from lab.api import Backend, MissingEngine
from lab.base.profile import Arm
from lab.base.row import ResultRow
from lab.cli import main as lab_main
from lab.hookspecs import hookimpl
from lab.kit.checks import import_failure
from lab.profile.load import parse_profile
from lab.registry import load_registry
from lab.runner import Runner
from lab.store import RunStore
from lab.tui.app import LabApp
from lab.tui.screens.error import ErrorScreen
from lab.tui.screens.export import ExportScreen
from lab.tui.screens.run import RunHeader, RunScreen, switcher_line
from lab.tui.widgets.comparison import ComparisonTable
from lab.tui.widgets.footer import FooterItem, fit
from lab.tui.widgets.lane import ArmLane, LaneMetrics
from lab.tui.widgets.plots import StepCostPlot
from tests.fakes import FakeBackend, fake_plugin, fake_registry, profile_toml
from tests.tui.helpers import run_finished, wait_until

pytestmark = pytest.mark.anyio
SIZES = [(80, 24), (100, 30)]

# the demo's arm names, every engine taking every core (the header's
# cadence note), two rounds (tok/s gains its min-max range)
DEMO_LIKE = """
[[arms]]
name = "baseline"
backend = "fake"
options = { token_delay_s = 0.004, busy_cores = 4096 }

[[arms]]
name = "ngram"
backend = "fake"
n_max = 4
options = { speculative = true, accepted = [4, 1, 0, 2], token_delay_s = 0.004, busy_cores = 4096 }

[[arms]]
name = "draft-q4_0"
backend = "fake"
n_max = 4
options = { speculative = true, accepted = [3], token_delay_s = 0.004, busy_cores = 4096 }

[[arms]]
name = "oracle"
backend = "fake"
n_max = 4
options = { speculative = true, accepted = [4], token_delay_s = 0.004, busy_cores = 4096 }
"""
ARMS = ("baseline", "ngram", "draft-q4_0", "oracle")


def screen_lines(app: App[Any]) -> list[str]:
    return [strip.text for strip in app.screen._compositor.render_strips()]


def _app(tmp_path: Path, arms: str = DEMO_LIKE, **kw: Any) -> LabApp:
    path = tmp_path / "profile.toml"
    kw.setdefault("prompts", ("prose", "code"))
    path.write_text(profile_toml(arms, name="demo", **kw), encoding="utf-8")
    return LabApp(str(path), registry=fake_registry(), runs_dir=tmp_path / "runs")


async def _dismiss_errors(pilot: Any) -> None:
    while type(pilot.app.screen).__name__ == "ErrorScreen":
        await pilot.press("escape")
        await pilot.pause()


async def _assert_frame(pilot: Any, size: tuple[int, int], what: str) -> list[str]:
    """Quit and Help in the footer, the header on one line of its own,
    the switcher's keys whole: whatever state ``what`` names."""
    app = pilot.app
    screen = app.screen
    assert isinstance(screen, RunScreen)
    # the footer composes its keys a frame after the bindings change
    try:
        await wait_until(pilot, lambda: "q Quit" in screen_lines(app)[-1], timeout=10)
    except AssertionError:
        pass  # said below, with the line
    lines = screen_lines(app)
    assert len(lines) == size[1]
    assert "q Quit" in lines[-1] and "f1 Help" in lines[-1], (what, lines[-1])
    header = screen.query_one(RunHeader)
    assert header.size.height == 1, what
    text = Text.from_markup(screen._header_text())
    assert "\n" not in text.plain and text.cell_len <= size[0] - 2, (what, text.plain)
    row = lines[header.region.y]
    assert "demo" in row and text.plain[:20] in row, (what, row)
    switcher = next(line for line in lines if line.strip().startswith("lanes "))
    assert "← →" in switcher and not switcher.rstrip().endswith("←"), (what, switcher)
    return lines


@pytest.mark.slow
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_quit_and_help_show_and_the_header_is_one_line_in_every_state(tmp_path: Path,
                                                                             size: tuple[int, int]) -> None:
    app = _app(tmp_path, rounds=2, max_tokens=120)
    async with app.run_test(size=size) as pilot:
        screen = app.screen
        assert isinstance(screen, RunScreen)
        await pilot.pause()
        assert "press s to start" in (await _assert_frame(pilot, size, "ready"))[0]

        await pilot.press("s")
        await wait_until(pilot, lambda: screen.lane("ngram").text.text.count(" ") > 10, what="ngram to stream")
        lines = await _assert_frame(pilot, size, "running")
        assert screen.session is not None and screen.session.cadence.reason, "the profile should run lean"
        assert "ngram" in lines[0]  # where the run is, kept while the rest gave way

        await pilot.press("p")
        await wait_until(pilot, lambda: screen.holding, what="the runner to hold")
        await pilot.pause()
        assert "paused" in (await _assert_frame(pilot, size, "paused"))[0]
        await pilot.press("p")
        await wait_until(pilot, lambda: not screen.paused, what="resume")

        await run_finished(pilot)
        await _dismiss_errors(pilot)
        lines = await _assert_frame(pilot, size, "done")

        # the table: at 100 columns accept stays once tok/s has a range
        # over rounds (the range gives way first, into the line below)
        head = next(line for line in lines if line.split()[:3] == ["arm", "prompt", "status"])
        table = screen.query_one(ComparisonTable)
        shown, _, ranged = table.layout_columns()
        if size[0] >= 100:
            assert "accept" in head, head
        assert "tok/s" in head and "speedup" in head and "verdict" in head
        if not ranged:
            detail = " ".join(str(screen.query_one("#verdict-line").render()).split())
            assert re.search(r"tok/s [\d.]+ \(\d+–\d+\)", detail), detail

        # every plot keeps its title, the middle one too
        await pilot.press("2")
        await pilot.pause(0.3)
        lines = await _assert_frame(pilot, size, "plots")
        plot = screen.query_one(StepCostPlot)
        title_row = lines[plot.region.y]
        assert "step cost" in title_row[plot.region.x: plot.region.right], title_row
        await pilot.press("1")
        await pilot.pause()
        await pilot.press("q")


async def test_the_table_has_the_focus_and_gets_it_back_after_another_view(tmp_path: Path) -> None:
    app = _app(tmp_path, prompts=("prose", "code", "chat"))
    async with app.run_test(size=(80, 24)) as pilot:
        screen = app.screen
        table = screen.query_one(ComparisonTable)
        await pilot.pause()
        assert app.focused is table
        await pilot.press("down")
        assert table.cursor_row == 1
        await pilot.press("2")
        await pilot.pause()
        await pilot.press("1")
        await pilot.pause()
        assert app.focused is table  # ↓ works at once, no Tab needed
        await pilot.press("down")
        assert table.cursor_row == 2


@pytest.mark.slow
async def test_the_lane_follows_the_running_arm_until_the_user_picks_one(tmp_path: Path) -> None:
    slow = DEMO_LIKE.replace("token_delay_s = 0.004", "token_delay_s = 0.01")
    app = _app(tmp_path, slow, prompts=("prose",), max_tokens=60)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = app.screen
        assert isinstance(screen, RunScreen) and screen.tabbed

        def shown() -> str:
            return next(a for a in ARMS if screen.lane(a).display)

        await pilot.press("s")
        await wait_until(pilot, lambda: screen.active_arm == "ngram", what="ngram to run")
        await pilot.pause()
        assert screen.arms[screen.selected].name == "ngram" and shown() == "ngram"
        switcher = next(line for line in screen_lines(app) if line.strip().startswith("lanes "))
        assert "▸ ngram" in switcher, switcher

        # the user looks back at the baseline (the run held meanwhile, so
        # the keys land while ngram runs): the next arm does not take the lane away
        await pilot.press("p")
        await wait_until(pilot, lambda: screen.holding, what="the run to hold in ngram")
        await pilot.press("left")
        await pilot.press("p")
        await wait_until(pilot, lambda: screen.active_arm == "draft-q4_0", what="draft-q4_0 to run")
        await pilot.pause()
        assert shown() == "baseline"

        # choosing the running arm's lane follows the run again
        await pilot.press("p")
        await wait_until(pilot, lambda: screen.holding, what="the run to hold in draft-q4_0")
        assert screen.active_arm == "draft-q4_0"
        await pilot.press("right", "right")
        await pilot.press("p")
        await wait_until(pilot, lambda: screen.active_arm == "oracle", what="oracle to run")
        await pilot.pause()
        assert shown() == "oracle"
        await run_finished(pilot)


REJECTING = """
[[arms]]
name = "base"
backend = "fake"
options = { virtual_clock = true }

[[arms]]
name = "spec"
backend = "fake"
n_max = 3
options = { speculative = true, accepted = [0, 3, 1], virtual_clock = true }
"""


@pytest.mark.slow
async def test_rejected_drafts_are_marked_with_a_legend_and_figures_carry_units(tmp_path: Path) -> None:
    steps: list[Any] = []

    def hook(message: object) -> None:
        from lab.tui.messages import TokensLanded

        if isinstance(message, TokensLanded) and message.cell.arm == "spec":
            steps.extend(message.steps)

    path = tmp_path / "profile.toml"
    path.write_text(profile_toml(REJECTING, name="demo", max_tokens=40), encoding="utf-8")
    app = LabApp(str(path), registry=fake_registry(), runs_dir=tmp_path / "runs")
    async with app.run_test(size=(80, 24), message_hook=hook) as pilot:
        screen = app.screen
        await pilot.press("s")
        await run_finished(pilot)
        await _dismiss_errors(pilot)
        lane = screen.lane("spec")
        rejected = sum(s.drafted - s.accepted for s in steps)
        assert rejected > 0 and lane.text.rejected == rejected
        assert "✗" not in lane.text.text  # marks are no part of the text
        screen._select(1)
        await pilot.pause()
        lines = screen_lines(app)
        body = "\n".join(lines)
        assert "✗3" in body and "✗2" in body  # a step of [0] drafts 3, rejects 3; of [1], 2
        # the legend of the marks, on screen
        assert any("✗n" in line and "rejected" in line and "accepted" in line for line in lines), body

        figures = str(lane.query_one(LaneMetrics).render())
        assert re.search(r"mean draft [\d.]+ ms · verify [\d.]+ ms", figures), figures
        assert re.search(r"accept \d+% · [\d.]+ tok/step", figures), figures
        # a speculative arm's gaps: the median (bursts land with no gap) and the tail
        assert re.search(r"itl p50 [\d.]+ ms · p95 [\d.]+ ms", figures), figures


def _row(**kw: Any) -> ResultRow:
    base = {"arm": "oracle", "backend": "fake", "drafter": "oracle", "prompt": "prose", "round": 1,
            "status": "ok", "n_tokens": 40, "tok_per_s": 100.0, "ttft_s": 0.395, "itl_p50_s": 0.0,
            "itl_p95_s": 0.024}
    return ResultRow.from_json({**base, **kw})


class LaneHolder(App[None]):
    def compose(self) -> ComposeResult:
        yield ArmLane(Arm(name="oracle", backend="fake", model=None, drafter="oracle", n_max=4, options={},
                          drafter_options={}, baseline="base", is_baseline=False, stack="fake", group="oracle"))


async def test_the_live_first_token_and_the_reports_ttft_are_named_apart() -> None:
    """The oracle's rehearsal passes run before its first token: the live
    figure counts them, the report's TTFT does not. Finished, the lane
    shows the report's figure and the passes' time beside it."""
    async with LaneHolder().run_test(size=(80, 16)) as pilot:
        lane = pilot.app.query_one(ArmLane)
        lane.apply_result(_row(engine_report={"rehearsal_s": 4.59}))
        await pilot.pause()
        figures = str(lane.query_one(LaneMetrics).render())
        assert "ttft 395.0 ms (+4.6 s rehearsal)" in figures, figures
        assert "itl p50 0.0 ms · p95 24.0 ms" in figures


def test_the_footer_keeps_quit_and_help_and_drops_keys_in_order() -> None:
    def item(action: str, display: str, text: str) -> FooterItem:
        return FooterItem(display, display, text, action, True, "")

    items = [item("select(-1)", "← →", "Lane"), item("start", "s", "Start"), item("save", "w", "Save"),
             item("export", "e", "Export"), item("show_tab('x')", "1 2 3", "Views"),
             item("app.quit", "q", "Quit"), item("app.help", "f1", "Help")]
    full = fit(items, 200)
    assert full == items
    kept = [i.description for i in fit(items, 40)]
    assert kept[-2:] == ["Quit", "Help"] and "Views" not in kept and "Lane" in kept
    assert [i.description for i in fit(items, 10)] == ["Quit", "Help"]


def test_the_switcher_never_cuts_its_keys() -> None:
    lanes = [(f"arm-{i}", "pending") for i in range(12)]
    for width in (40, 60, 78, 98):
        line = switcher_line(lanes, 5, "arm-5", width)
        assert line.cell_len <= width and line.plain.startswith("lanes ← →"), line.plain
        assert "▸ arm-5" in line.plain
    wide = switcher_line(lanes[:3], 0, None, 200)
    assert all(f"arm-{i} pending" in wide.plain for i in range(3))


@pytest.mark.slow
async def test_the_export_dialog_says_its_keys_and_marks_the_format_without_colour(tmp_path: Path) -> None:
    app = _app(tmp_path, prompts=("prose",), max_tokens=20)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = app.screen
        await pilot.press("s")
        await run_finished(pilot)
        await _dismiss_errors(pilot)
        await pilot.press("e")
        await wait_until(pilot, lambda: isinstance(app.screen, ExportScreen))
        await pilot.pause()
        lines = screen_lines(app)
        assert any("tab: path · esc cancels" in line for line in lines), lines
        marks = {fmt: next(line for line in lines if re.search(rf"▌ {fmt}\b", line)) for fmt in ("Markdown", "CSV", "JSON")}
        assert "●" in marks["Markdown"] and "○" in marks["CSV"] and "○" in marks["JSON"], marks
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is screen)


def _saved_run(tmp_path: Path) -> Path:
    registry = fake_registry()
    arms = REJECTING
    profile = parse_profile(profile_toml(arms, name="saved", max_tokens=20), "saved.toml", registry)
    store = RunStore(profile, tmp_path / "runs")
    Runner(profile, registry, store).run()
    return Path(store.path)


def test_lab_run_dir_opens_the_saved_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    import lab.tui.app as tui_app

    run_dir = _saved_run(tmp_path)
    opened: list[dict[str, Any]] = []
    monkeypatch.setattr(tui_app, "run_app", lambda *a, **kw: opened.append({"args": a, **kw}) or 0)
    assert lab_main([str(run_dir)]) == 0
    assert opened and opened[0]["saved_run"] == str(run_dir)

    # a directory that is no saved run is refused, saying what lab opens
    empty = tmp_path / "empty"
    empty.mkdir()
    assert lab_main([str(empty)]) == 2
    err = capsys.readouterr().err
    assert str(empty) in err and "not a saved run" in err
    assert len(opened) == 1


async def test_the_app_opens_a_saved_run_directory_read_only(tmp_path: Path) -> None:
    run_dir = _saved_run(tmp_path)
    app = LabApp(None, registry=fake_registry(), saved_run=str(run_dir), runs_dir=tmp_path / "runs")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, RunScreen))
        screen = app.screen
        assert isinstance(screen, RunScreen) and screen.read_only
        assert screen.lane("spec").text.text  # the saved text
        # the footer composes its keys a frame after the screen is up
        await wait_until(pilot, lambda: "q Quit" in screen_lines(app)[-1], what="the footer's keys")
        lines = screen_lines(app)
        assert "read-only" in lines[0] and "q Quit" in lines[-1]
        assert not screen.check_action("start", ())


SHADOW = "speclab_tui_shadow_engine"


class ShadowEngine(FakeBackend):
    """The fake stream behind an engine that does not import: the check is
    the real one (lab.kit.checks.import_failure, in a child interpreter)."""

    name = "fake-shadow"

    @classmethod
    def missing_engine(cls, arm_options: Mapping[str, Any]) -> MissingEngine | None:
        why = import_failure(SHADOW)
        return MissingEngine(SHADOW, why, "pip install speclab-tui-shadow-engine") if why else None


class _ShadowPlugin:
    __name__ = "tests.tui.test_every_terminal"

    @hookimpl
    def lab_register_backends(self, register: Callable[[type[Backend]], None]) -> None:
        register(ShadowEngine)


NEEDS_ENGINE = """
[[arms]]
name = "base"
backend = "fake"
options = { virtual_clock = true }

[[arms]]
name = "needs-engine"
backend = "fake-shadow"
n_max = 3
options = { speculative = true, virtual_clock = true }
"""


async def test_an_arm_whose_engine_does_not_import_is_refused_on_screen_and_nothing_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a package of the engine's name that fails to import, first on the path
    # of this process and of the check's child interpreter, as a broken install looks
    shadow = tmp_path / "shadow"
    (shadow / SHADOW).mkdir(parents=True)
    (shadow / SHADOW / "__init__.py").write_text(f'raise ImportError("No module named {SHADOW!r}")\n',
                                                  encoding="utf-8")
    monkeypatch.syspath_prepend(str(shadow))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(shadow), os.environ.get("PYTHONPATH", "")]))
    path = tmp_path / "profile.toml"
    path.write_text(profile_toml(NEEDS_ENGINE, name="demo"), encoding="utf-8")
    registry = load_registry(extra_plugins=[fake_plugin, _ShadowPlugin()])
    runs = tmp_path / "runs"
    before = len(FakeBackend.instances)
    app = LabApp(str(path), registry=registry, runs_dir=runs)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = next(s for s in app.screen_stack if isinstance(s, RunScreen))

        async def refusal(what: str) -> None:
            await wait_until(pilot, lambda: isinstance(app.screen, ErrorScreen), timeout=60, what=what)
            await pilot.pause()
            # the dialog's words, its frame and the lanes' borders aside
            text = " ".join(re.sub(r"[│█▀▄▔▁╭╮╰╯─]", " ", " ".join(screen_lines(app))).split())
            # which arm, what is missing, why, the command that installs it
            assert "needs-engine" in text and SHADOW in text, text
            assert "No module named" in text and "pip install speclab-tui-shadow-engine" in text, text
            assert "Nothing was run" in text
            await pilot.press("escape")
            await wait_until(pilot, lambda: app.screen is screen)

        # found as the profile opens, before anything is asked to run
        await refusal("the check as the profile opens")
        assert "cannot run" in screen_lines(app)[0]
        screen._select(1)
        await pilot.pause()
        lane = " ".join(re.sub(r"[│╭╮╰╯─]", " ", " ".join(screen_lines(app))).split())
        assert f"{SHADOW} cannot load" in lane and "install: pip install speclab-tui-shadow-engine" in lane, lane
        assert "q Quit" in screen_lines(app)[-1]

        # s asks again, and is refused again: no run directory, no engine loaded
        await pilot.press("s")
        await refusal("the refusal of s")
        await app.workers.wait_for_complete()
        assert screen.session is not None and not screen.session.running
        assert screen.state == "refused" and "cannot run" in screen_lines(app)[0]
        assert not runs.exists() or not any(runs.iterdir())
        assert not [b for b in FakeBackend.instances[before:] if b.arm.name in ("base", "needs-engine")]
        await pilot.press("q")
