"""Pilot tests of the lab with the scripted fake backend: what the run
screen shows and does. Messages first, then what the widgets hold."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import psutil
import pytest
from textual.message import Message

from lab.analysis.run import summarize
from lab.profile.load import parse_profile
from lab.registry import LoadError, Registry
from lab.render.report import load_for_report, render
from lab.runner import Runner
from lab.store import RunStore, load_run, load_steps
from lab.tui.app import LabApp
from lab.tui.messages import ArmStatusChanged, CellFinished, PauseChanged, RunBegan, RunEnded, RunFailed, TokensLanded
from lab.tui.screens.error import ErrorScreen
from lab.tui.screens.export import ExportScreen
from lab.tui.screens.picker import PickerScreen
from lab.tui.screens.plugins import PluginsScreen
from lab.tui.screens.run import RunScreen
from lab.tui.widgets.comparison import COLUMNS, ComparisonTable, one_line_verdict, row_key, summary_cells
from tests.fakes import BASE_AND_SPEC, FakeBackend, fake_registry, profile_toml
from tests.tui.helpers import run_finished, wait_until

pytestmark = pytest.mark.anyio
SIZE = (140, 45)


def _app(tmp_path: Path, arms: str, **kw: Any) -> LabApp:
    path = tmp_path / "profile.toml"
    path.write_text(profile_toml(arms, **kw), encoding="utf-8")
    return LabApp(str(path), registry=fake_registry(), runs_dir=tmp_path / "runs")


class Recorder:
    def __init__(self) -> None:
        self.messages: list[Message] = []

    def __call__(self, message: Message) -> None:
        self.messages.append(message)

    def of(self, kind: type) -> list[Any]:
        return [m for m in self.messages if isinstance(m, kind)]


def _cell_text(table: ComparisonTable, arm: str, prompt: str, column: str) -> str:
    return str(table.get_cell(row_key(arm, prompt), column))


async def test_run_streams_lanes_and_fills_the_comparison(tmp_path: Path) -> None:
    app = _app(tmp_path, BASE_AND_SPEC, max_tokens=40, prompts=("prose", "code"))
    rec = Recorder()
    async with app.run_test(size=SIZE, message_hook=rec) as pilot:
        screen = app.screen
        assert isinstance(screen, RunScreen) and screen.state == "ready"
        await pilot.press("s")
        await run_finished(pilot)

        # messages first: the screen asked the app to start, the run's came back
        assert len({id(m) for m in rec.of(RunScreen.StartRequested)}) == 1  # seen by the screen, then the app
        assert len(rec.of(RunBegan)) == 1 and len(rec.of(RunEnded)) == 1
        finished = rec.of(CellFinished)
        assert sorted((m.row.arm, m.row.prompt) for m in finished) == [
            ("base", "code"), ("base", "prose"), ("spec", "code"), ("spec", "prose")]
        landed = rec.of(TokensLanded)
        spec_draft = "".join(t for m in landed if m.cell.arm == "spec" for t, d in m.segments if d)
        base_draft = "".join(t for m in landed if m.cell.arm == "base" for t, d in m.segments if d)
        assert spec_draft and not base_draft
        statuses = [m.event.status.value for m in rec.of(ArmStatusChanged) if m.event.cell.arm == "spec"]
        assert statuses[0] == "loading" and "running" in statuses and statuses[-1] == "ok"

        # the lanes hold the last cell's text, drafted tokens marked apart
        run_dir = screen.session.run_dir
        data = load_run(run_dir)
        last = {r["arm"]: r for r in data["results"]}
        for arm in ("base", "spec"):
            lane = screen.lane(arm)
            assert lane.text.text == last[arm]["text"]
            assert lane.status.value == "ok"
        assert screen.lane("spec").text.drafted_chars > 0
        assert screen.lane("base").text.drafted_chars == 0

        # the table shows what the saved report summarizes
        table = screen.query_one(ComparisonTable)
        width = table.ordered_columns[-1].width  # the verdict's, one line a row
        for s in summarize(data["results"]):
            cells = summary_cells(s)
            for (col, _), want in zip(COLUMNS[:-1], cells):
                assert _cell_text(table, s["arm"], s["prompt"], col) == str(want), (s["arm"], col)
            # the verdict on one line: whole where it fits, else its kind and figures, a busy mark kept
            shown = _cell_text(table, s["arm"], s["prompt"], "verdict")
            assert shown == one_line_verdict(cells[-1], s, width).plain, s["arm"]
        assert _cell_text(table, "spec", "prose", "identical") == "yes"
        assert _cell_text(table, "spec", "prose", "accept") not in ("—", "")


@pytest.mark.slow
async def test_failures_become_modals_and_the_run_goes_on(tmp_path: Path) -> None:
    arms = BASE_AND_SPEC + """
[[arms]]
name = "oomer"
backend = "fake"
options = { mode = "oom", virtual_clock = true }

[[arms]]
name = "crasher"
backend = "fake"
n_max = 2
options = { speculative = true, mode = "crash", fail_after = 5, virtual_clock = true }
"""
    app = _app(tmp_path, arms)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("s")
        await app.workers.wait_for_complete()
        await wait_until(pilot, lambda: isinstance(app.screen, ErrorScreen), what="an error modal")
        first = app.screen
        assert isinstance(first, ErrorScreen)
        # one modal per failed arm, in the order the run met them (paired: the crasher beside its baseline first)
        modals = {first.title_text.split(":")[0]: first}
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, ErrorScreen) and app.screen is not first,
                         what="the second error modal")
        modals[app.screen.title_text.split(":")[0]] = app.screen
        assert sorted(modals) == ["crasher", "oomer"]
        oom, crash = modals["oomer"], modals["crasher"]
        assert "oom" in oom.title_text and "out of memory" in oom.detail and "fake engine log" in oom.detail
        assert "crashed" in crash.title_text and "signal 11" in crash.detail
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.state == "done")
        screen = app.screen
        assert screen.lane("oomer").status.value == "oom"
        assert screen.lane("crasher").status.value == "crashed"
        assert screen.lane("spec").status.value == "ok"
        table = screen.query_one(ComparisonTable)
        assert _cell_text(table, "oomer", "prose", "status") == "oom"
        assert _cell_text(table, "crasher", "prose", "verdict").startswith("failed: crashed")


async def test_a_run_whose_worker_fails_shows_the_error_and_the_screen_says_failed(tmp_path: Path) -> None:
    path = tmp_path / "profile.toml"
    path.write_text(profile_toml(BASE_AND_SPEC), encoding="utf-8")
    (tmp_path / "runs").write_text("a file where the run directories should go")
    app = LabApp(str(path), registry=fake_registry(), runs_dir=tmp_path / "runs")
    rec = Recorder()
    async with app.run_test(size=SIZE, message_hook=rec) as pilot:
        screen = app.screen
        await pilot.press("s")
        await wait_until(pilot, lambda: isinstance(app.screen, ErrorScreen), what="the error modal")
        assert "the run stopped with an error" in app.screen.title_text
        assert len(rec.of(RunFailed)) == 1
        await pilot.press("escape")
        await wait_until(pilot, lambda: screen.state == "failed", what="the screen to say failed")
        assert "failed" in screen._header_text() and screen.check_action("start", ()) is True


async def test_pause_holds_before_the_next_cell_and_resume_goes_on(tmp_path: Path) -> None:
    # loading takes real time, so the pause lands before the first cell
    arms = BASE_AND_SPEC.replace("options = { virtual_clock = true }", "options = { virtual_clock = true, load_s = 3.0 }", 1)
    app = _app(tmp_path, arms, max_tokens=16)
    rec = Recorder()
    async with app.run_test(size=SIZE, message_hook=rec) as pilot:
        await pilot.press("s", "p")
        await wait_until(pilot, lambda: any(m.holding for m in rec.of(PauseChanged)), what="the runner to hold")
        held_tokens = len(rec.of(TokensLanded))
        assert app.screen.paused and "paused" in app.screen._header_text()
        await pilot.pause(0.2)
        assert len(rec.of(TokensLanded)) == held_tokens
        await pilot.press("p")
        await run_finished(pilot)
        assert app.screen.state == "done"
        assert {m.row.status.value for m in rec.of(CellFinished)} == {"ok"}


async def test_pause_mid_cell_holds_between_steps_and_the_hold_is_not_measured(tmp_path: Path) -> None:
    arms = '[[arms]]\nname = "slow"\nbackend = "fake"\nn_max = 4\noptions = { speculative = true, token_delay_s = 0.01 }\n'
    # long enough that a busy machine still presses p before the cell ends
    app = _app(tmp_path, arms, max_tokens=300)
    rec = Recorder()
    async with app.run_test(size=SIZE, message_hook=rec) as pilot:
        screen = app.screen
        await pilot.press("s")
        await wait_until(pilot, lambda: screen.lane("slow").text.text != "", what="text to land")
        await pilot.press("p")
        await wait_until(pilot, lambda: any(m.holding for m in rec.of(PauseChanged)), what="the runner to hold")
        header = screen._header_text()
        assert "paused (p resumes)" in header and "slow · prose" in header and header.count("paused") == 1
        assert str(screen.lane("slow").query_one("StatusBadge").render()).startswith("paused")
        await pilot.pause(0.1)  # let the bridge flush what landed before the hold
        shown = screen.lane("slow").text.text
        await pilot.pause(1.0)
        assert screen.lane("slow").text.text == shown, "tokens landed while paused"
        await pilot.press("p")
        await run_finished(pilot)
        assert "paused" not in screen._header_text()
        row = load_run(screen.session.run_dir)["results"][0]
        assert row["status"] == "ok" and row["engine_report"]["paused_s"] >= 1.0
        # 300 tokens sleep 3 s; with the hold left in, gen_s would be at
        # least that plus the time held
        assert row["gen_s"] < 300 * 0.01 + row["engine_report"]["paused_s"]


async def test_cancel_selected_arm_and_skip_running_arm(tmp_path: Path) -> None:
    arms = """
[[arms]]
name = "slow"
backend = "fake"
options = { token_delay_s = 0.02 }

[[arms]]
name = "later"
backend = "fake"
options = { virtual_clock = true }

[[arms]]
name = "last"
backend = "fake"
options = { virtual_clock = true }
"""
    app = _app(tmp_path, arms, max_tokens=400)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        await pilot.press("s")
        await wait_until(pilot, lambda: screen.lane("slow").text.text != "", what="slow to stream")
        await pilot.click("#lane-later")  # select a lane by clicking it
        assert screen.arms[screen.selected].name == "later"
        await pilot.press("c")  # cancel "later" before it starts
        await pilot.press("n")  # skip the running arm
        await run_finished(pilot)
        rows = {r["arm"]: r["status"] for r in load_run(screen.session.run_dir)["results"]}
        assert rows == {"slow": "skipped", "later": "cancelled", "last": "ok"}
        assert screen.lane("last").status.value == "ok"


async def test_save_and_export_write_into_the_run_directory(tmp_path: Path) -> None:
    app = _app(tmp_path, BASE_AND_SPEC)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("w")  # nothing to save before a run: no crash
        await pilot.press("s")
        await run_finished(pilot)
        run_dir = app.screen.session.run_dir
        (run_dir / "report.md").unlink()
        await pilot.press("w")
        await pilot.pause()
        data = load_for_report(run_dir)
        assert "acceptance" in (run_dir / "report.md").read_text().lower()
        assert (run_dir / "report.md").read_text() == render(data, "md")
        assert (run_dir / "comparison.csv").read_text() == render(data, "csv")

        await pilot.press("e")
        await wait_until(pilot, lambda: isinstance(app.screen, ExportScreen))
        await pilot.click("#fmt-csv")
        await pilot.pause()
        target = tmp_path / "out" / "cmp.csv"
        app.screen.query_one("#export-path").value = str(target)
        await pilot.click("#export-ok")
        await wait_until(pilot, lambda: target.exists(), what="the export")
        rows = list(csv.DictReader(io.StringIO(target.read_text())))
        assert [r["arm"] for r in rows] == ["base", "spec"]


async def test_open_a_saved_run_read_only(tmp_path: Path) -> None:
    registry = fake_registry()
    profile = parse_profile(profile_toml(BASE_AND_SPEC, max_tokens=30, rounds=2), "p.toml", registry)
    store = RunStore(profile, tmp_path / "runs")
    Runner(profile, registry, store).run()
    app = LabApp(None, registry=registry, runs_dir=tmp_path / "runs", profiles_dir=tmp_path, saved_run=store.path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, RunScreen))
        screen = app.screen
        assert screen.read_only
        assert screen.check_action("start", ()) is False
        await pilot.press("s")
        assert screen.session is None
        table = screen.query_one(ComparisonTable)
        data = load_run(store.path)
        want = {s["arm"]: summary_cells(s) for s in summarize(data["results"])}
        assert _cell_text(table, "spec", "prose", "speedup") == want["spec"][4]
        shown = data["results"][-1]
        assert screen.lane("spec").text.text == shown["text"]
        # tokens from accepted drafts stay marked in a reopened run
        drafted = sum(n for n, from_draft in shown["text_origin"] if from_draft)
        assert 0 < drafted < len(shown["text"])
        assert screen.lane("spec").text.drafted_chars == drafted
        steps = load_steps(store.path)
        assert sorted(screen.series["spec"].landed) == sorted(s["landed"] for s in steps if s["arm"] == "spec")
        assert len(screen.series["base"].rate) == 2  # one tok/s point per baseline round
        # back to the picker it was opened from
        await pilot.press("escape")
        assert isinstance(app.screen, PickerScreen)


@pytest.mark.slow
async def test_picker_lists_profiles_and_runs_and_opens_them(tmp_path: Path) -> None:
    registry = fake_registry()
    (tmp_path / "a.toml").write_text(profile_toml(BASE_AND_SPEC, name="alpha"))
    profile = parse_profile(profile_toml(BASE_AND_SPEC, name="beta"), "b.toml", registry)
    store = RunStore(profile, tmp_path / "runs")
    Runner(profile, registry, store).run()
    app = LabApp(None, registry=registry, runs_dir=tmp_path / "runs", profiles_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        picker = app.screen
        assert isinstance(picker, PickerScreen)
        kinds = sorted(k for k, _ in picker.choices.values())
        assert kinds == ["profile", "run"]
        picker.query_one("#picker").highlighted = 1  # the first profile
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, RunScreen))
        assert app.screen.profile_name == "alpha" and not app.screen.read_only
        await pilot.press("o")
        await wait_until(pilot, lambda: isinstance(app.screen, PickerScreen))
        picker = app.screen
        run_index = next(i for i, o in enumerate(picker.query_one("#picker")._options) if o.id == "run-0")
        picker.query_one("#picker").highlighted = run_index
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.read_only)
        assert app.screen.profile_name == "beta"


async def test_a_broken_profile_opens_the_picker_with_the_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(profile_toml('[[arms]]\nname = "x"\nbackend = "nope"\n'))
    app = LabApp(str(bad), registry=fake_registry(), runs_dir=tmp_path / "runs")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ErrorScreen))
        assert "unknown backend 'nope'" in app.screen.detail and "bad.toml" in app.screen.detail
        await pilot.press("escape")
        assert isinstance(app.screen, PickerScreen)


async def test_plugins_screen_lists_backends_drafters_and_load_errors(tmp_path: Path) -> None:
    registry = fake_registry()
    registry.errors.append(LoadError("broken-plugin", "lab.backends", "ImportError: no module named 'nothing'"))
    app = _app(tmp_path, BASE_AND_SPEC)
    app._lab_registry = registry
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f2")
        await wait_until(pilot, lambda: isinstance(app.screen, PluginsScreen))
        backends = app.screen.query_one("#backends")
        assert "fake" in [str(k.value) for k in backends.rows]
        errors = [str(w.render()) for w in app.screen.query(".load-error")]
        assert any("broken-plugin" in e and "no module named" in e for e in errors)
        await pilot.press("escape")
        assert isinstance(app.screen, RunScreen)


async def test_help_and_command_palette_commands(tmp_path: Path) -> None:
    app = _app(tmp_path, BASE_AND_SPEC)
    async with app.run_test(size=SIZE) as pilot:
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for want in ("Start run (s)", "Save comparison (w)", "Export comparison (e)", "Plugins (f2)", "Open (o)",
                     "Help (f1)", "Show plots (2)", "Show comparison (1)", "Next lane (→)"):
            assert want in titles
        assert "Pause (p)" not in titles and "Resume (p)" not in titles  # nothing to pause before a run
        await pilot.press("f1")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "HelpScreen")
        await pilot.press("escape")
        assert isinstance(app.screen, RunScreen)


@pytest.mark.parametrize("paused", [False, True], ids=["running", "paused"])
async def test_quitting_mid_run_stops_every_engine(tmp_path: Path, paused: bool) -> None:
    arms = """
[[arms]]
name = "server"
backend = "fake"
options = { spawn_child = true, token_delay_s = 0.05 }

[[arms]]
name = "after"
backend = "fake"
options = { spawn_child = true }
"""
    FakeBackend.instances.clear()
    app = _app(tmp_path, arms, max_tokens=2000)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("s")
        await wait_until(pilot, lambda: app.screen.lane("server").text.text != "", what="the engine to stream")
        child = FakeBackend.instances[0].child
        assert child is not None and psutil.pid_exists(child.pid) and child.poll() is None
        if paused:  # a runner held mid-cell lets go when the app quits
            await pilot.press("p")
            await wait_until(pilot, lambda: "paused (p resumes)" in app.screen._header_text(), what="the runner to hold")
        await pilot.press("q")
    assert child.poll() is not None, "the engine process outlived the app"
    assert all(b.closed for b in FakeBackend.instances)
    assert len(FakeBackend.instances) == 1  # the second arm never started an engine
    assert not app.active_session()


async def test_plugins_with_no_registry_errors_say_none(tmp_path: Path) -> None:
    app = _app(tmp_path, BASE_AND_SPEC)
    app._lab_registry = Registry(backends={"fake": FakeBackend})
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f2")
        await wait_until(pilot, lambda: isinstance(app.screen, PluginsScreen))
        assert len(app.screen.query(".no-errors")) == 1


def test_a_verdict_taken_on_a_busy_machine_carries_the_warning_in_the_table() -> None:
    import dataclasses

    from lab.base.events import Status
    from lab.base.row import ResultRow
    from lab.base.verdict import BUSY_WARNING

    row = ResultRow(arm="spec", backend="fake", drafter=None, prompt="p", round=1, status=Status.OK, is_baseline=False,
                    baseline_arm="base", tok_per_s=10.0, speedup=1.2, verdict="pays: 1.20x", contended=True,
                    n_tokens=8)
    quiet = dataclasses.replace(row, contended=False)
    busy_cell = summary_cells(summarize([row])[0])[-1]
    quiet_cell = summary_cells(summarize([quiet])[0])[-1]
    assert BUSY_WARNING in str(busy_cell) and BUSY_WARNING not in str(quiet_cell)
