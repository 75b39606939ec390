"""Every view and action of the lab by keyboard alone (no clicks, no
direct calls), and the comparison's verdict in full at 160 columns.

The run uses the scripted fake backend; what the screen shows is read back
from its rendered lines, as a user would read it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lab.profile.load import parse_profile
from lab.runner import Runner
from lab.store import RunStore, load_run
from lab.tui.app import LabApp
from lab.tui.screens.export import ExportScreen
from lab.tui.screens.help import HelpScreen
from lab.tui.screens.picker import PickerScreen
from lab.tui.screens.plugins import PluginsScreen
from lab.tui.screens.run import RunScreen
from lab.tui.widgets.comparison import ComparisonTable, VerdictLine, row_key
from tests.fakes import BASE_AND_SPEC, fake_registry, profile_toml
from tests.tui.helpers import run_finished, wait_until

pytestmark = pytest.mark.anyio

# A verdict of every length: pays, loses at this acceptance, structural loss.
VERDICT_ARMS = """
[[arms]]
name = "base"
backend = "fake"
options = { virtual_clock = true }

[[arms]]
name = "good"
backend = "fake"
n_max = 4
options = { speculative = true, accepted = [4, 3], virtual_clock = true }

[[arms]]
name = "poor"
backend = "fake"
n_max = 4
options = { speculative = true, accepted = [0, 1], virtual_clock = true }

[[arms]]
name = "dead"
backend = "fake"
n_max = 2
options = { speculative = true, accepted = [2], virtual_clock = true, virtual_draft_s = 0.05 }
"""


def screen_lines(app: LabApp) -> list[str]:
    """The screen as text, one string per terminal line."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


def footer_keys(app: LabApp) -> dict[str, str]:
    """What the footer offers: key -> action, for the bindings shown."""
    return {key: b.binding.action for key, b in app.screen.active_bindings.items() if b.binding.show and b.enabled}


def _saved_run(tmp_path: Path, arms: str) -> Path:
    registry = fake_registry()
    profile = parse_profile(profile_toml(arms, name="verdicts", rounds=1), "verdicts.toml", registry)
    store = RunStore(profile, tmp_path / "runs")
    Runner(profile, registry, store).run()
    return store.path


def _verdict_column_text(app: LabApp, table: ComparisonTable) -> str:
    """The verdict column as rendered, its wrapped lines joined."""
    lines = screen_lines(app)
    region = table.content_region
    head = next(i for i in range(region.y, region.bottom) if "verdict" in lines[i])
    x = lines[head].index("verdict")
    column = [lines[i][x:region.right].strip() for i in range(head + 1, region.bottom)]
    return " ".join(" ".join(column).split())


@pytest.mark.slow
async def test_at_160_columns_each_verdict_is_one_line_and_reads_in_full_below(tmp_path: Path) -> None:
    run_dir = _saved_run(tmp_path, VERDICT_ARMS)
    verdicts = {r["arm"]: r["verdict"] for r in load_run(run_dir)["results"]}
    assert "loses" in verdicts["poor"] and "structural loss" in verdicts["dead"]
    assert max(len(v) for v in verdicts.values()) > 100  # longer than any column could be at 160
    app = LabApp(None, registry=fake_registry(), runs_dir=tmp_path / "runs", profiles_dir=tmp_path,
                 saved_run=run_dir)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, RunScreen))
        await pilot.pause()
        table = app.screen.query_one(ComparisonTable)
        shown = _verdict_column_text(app, table)
        width = table.ordered_columns[-1].width  # the verdict, last
        for arm, verdict in verdicts.items():
            flat = " ".join(verdict.split())
            if len(flat) <= width:  # a verdict that fits reads in full in its row
                assert flat in shown, f"{arm}: {verdict!r} not in full in {shown!r}"
        assert all(table.rows[key].height == 1 for key in table.rows)  # one line a row
        # the other columns are not cut either
        assert "status" in screen_lines(app)[table.content_region.y]
        for arm in verdicts:
            assert str(table.get_cell(row_key(arm, "prose"), "status")) == "ok"
        # every verdict reads in full under the table as its row is highlighted
        order = [str(table.get_cell_at((i, 0))) for i in range(table.row_count)]
        for i, arm in enumerate(order):
            if i:
                await pilot.press("down")
                await pilot.pause()
            line = str(app.screen.query_one(VerdictLine).render())
            assert " ".join(verdicts[arm].split()) in " ".join(line.split()), arm


async def test_a_narrow_table_abbreviates_the_verdict_and_shows_it_in_full_below(tmp_path: Path) -> None:
    run_dir = _saved_run(tmp_path, VERDICT_ARMS)
    verdicts = {r["arm"]: r["verdict"] for r in load_run(run_dir)["results"]}
    app = LabApp(None, registry=fake_registry(), runs_dir=tmp_path / "runs", profiles_dir=tmp_path,
                 saved_run=run_dir)
    longest = max(verdicts, key=lambda arm: len(verdicts[arm]))
    async with app.run_test(size=(90, 40)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, RunScreen))
        await pilot.pause()
        table = app.screen.query_one(ComparisonTable)
        shown = _verdict_column_text(app, table)
        # the longest verdict is cut to its kind and figures, not mid-word
        assert " ".join(verdicts[longest].split()) not in shown
        assert "costs" in shown and any(k in shown for k in ("structural", "loses", "break-even")), shown
        assert table.size.width <= 90 and table.virtual_size.width <= table.size.width  # no sideways scroll
        order = [str(table.get_cell_at((i, 0))) for i in range(table.row_count)]
        for _ in range(order.index(longest)):
            await pilot.press("down")
        await pilot.pause()
        line = str(app.screen.query_one(VerdictLine).render())
        assert verdicts[longest] in " ".join(line.split())


@pytest.mark.slow
async def test_every_view_and_action_by_keyboard(tmp_path: Path) -> None:
    profile = tmp_path / "profile.toml"
    slow = BASE_AND_SPEC.replace("options = { virtual_clock = true }", "options = { token_delay_s = 0.02 }")
    profile.write_text(profile_toml(slow, max_tokens=100), encoding="utf-8")
    app = LabApp(str(profile), registry=fake_registry(), runs_dir=tmp_path / "runs", profiles_dir=tmp_path)
    async with app.run_test(size=(160, 50)) as pilot:
        screen = app.screen
        assert isinstance(screen, RunScreen)
        # the start state says what to do
        assert "press s to start" in "\n".join(screen_lines(app))
        assert footer_keys(app)["s"] == "start"
        tabs = screen.query_one("#bottom")
        for key in ("2", "1", "3"):
            assert any(k == key for k in footer_keys(app)), f"{key} not in the footer"
        assert "1 2 3 Views" in screen_lines(app)[-1]

        # tabs by number; the arrows move between lanes whatever has focus
        await pilot.press("2")
        assert tabs.active == "tab-plots"
        await pilot.press("3")
        assert tabs.active == "tab-categories"
        await pilot.press("1")
        assert tabs.active == "tab-comparison"
        for _ in range(3):  # the focus goes round every focusable widget
            await pilot.press("tab")
            before = screen.selected
            await pilot.press("right")
            assert screen.selected == (before + 1) % len(screen.arms) and tabs.active == "tab-comparison"
            await pilot.press("left")
            assert screen.selected == before and tabs.active == "tab-comparison"

        # run, pause (the footer then offers resume), resume
        await pilot.press("s")
        await wait_until(pilot, lambda: screen.session is not None and screen.lane("base").text.text != "",
                         what="tokens to land")
        assert footer_keys(app).get("p") == "pause"
        await pilot.press("p")
        await wait_until(pilot, lambda: footer_keys(app).get("p") == "resume", what="the footer to offer resume")
        assert "Resume" in "\n".join(screen_lines(app)[-2:])
        assert "Pause" not in "\n".join(screen_lines(app)[-2:])
        await pilot.press("p")
        await wait_until(pilot, lambda: footer_keys(app).get("p") in ("pause", None), what="resume")
        await run_finished(pilot)
        assert screen.state == "done"

        # save, export through its dialog, by keys
        await pilot.press("w")
        await wait_until(pilot, lambda: (screen.run_dir() / "report.md").exists(), what="report.md")
        await pilot.press("e")
        await wait_until(pilot, lambda: isinstance(app.screen, ExportScreen))
        await pilot.press("enter")  # the format list has the focus: Markdown to its default path
        await wait_until(pilot, lambda: isinstance(app.screen, RunScreen))

        # help, plugins, the palette
        await pilot.press("f1")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.press("escape")
        await pilot.press("f2")
        await wait_until(pilot, lambda: isinstance(app.screen, PluginsScreen))
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is screen)
        await pilot.press("ctrl+p")
        await pilot.pause(0.2)
        await pilot.press(*"show plots")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.screen is screen and tabs.active == "tab-plots",
                         what="the palette to switch to the plots")

        # open the saved run from the picker, read-only, and back
        await pilot.press("o")
        await wait_until(pilot, lambda: isinstance(app.screen, PickerScreen))
        picker = app.screen
        options = picker.query_one("#picker")
        run_index = next(i for i in range(options.option_count)
                         if options.get_option_at_index(i).id == "run-0")
        while options.highlighted != run_index:
            await pilot.press("down")
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.read_only)
        saved = app.screen
        assert "start" not in footer_keys(app).values()
        await pilot.press("2")
        assert saved.query_one("#bottom").active == "tab-plots"
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is screen)
        await pilot.press("q")


async def test_lane_titles_name_the_tabs_and_keys(tmp_path: Path) -> None:
    """The tab labels carry their key, so the screen itself teaches it."""
    profile = tmp_path / "profile.toml"
    profile.write_text(profile_toml(BASE_AND_SPEC), encoding="utf-8")
    app = LabApp(str(profile), registry=fake_registry(), runs_dir=tmp_path / "runs")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        text = "\n".join(screen_lines(app))
        assert re.search(r"1 Comparison.*2 Plots", text)
