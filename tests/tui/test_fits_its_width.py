"""What docs/tui.md promises of a terminal's width, read off the rendered
screen: at 120x40 the demo's four lanes side by side and the compare screen
whole (its least telling columns give way, named in its foot); at 80x24
the per-category view's last column whole; `lab --help` names every way
into the TUI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lab.cli import build_parser
from lab.profile.load import parse_profile
from lab.runner import Runner
from lab.store import RunStore
from lab.tui.app import LabApp
from lab.tui.screens.compare import CompareFoot, CompareScreen
from lab.tui.screens.run import RunScreen
from lab.tui.widgets.categories import CategoryTable
from lab.tui.widgets.lane import ArmLane
from tests.fakes import fake_registry, profile_toml
from tests.tui.helpers import run_finished, wait_until
from tests.tui.test_every_terminal import ARMS, DEMO_LIKE, screen_lines

pytestmark = pytest.mark.anyio
QUICK = DEMO_LIKE.replace("token_delay_s = 0.004", "virtual_clock = true")


def _within(app: Any, widget: Any, width: int) -> bool:
    region = widget.region
    return region.x >= 0 and region.right <= width and region.width > 0


async def test_at_120_columns_the_demos_four_lanes_stand_side_by_side(tmp_path: Path) -> None:
    path = tmp_path / "demo.toml"
    path.write_text(profile_toml(QUICK, name="demo", prompts=("prose", "code")), encoding="utf-8")
    app = LabApp(str(path), registry=fake_registry(), runs_dir=tmp_path / "runs")
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, RunScreen))
        screen = app.screen
        await pilot.pause()
        assert not screen.tabbed
        lanes = [screen.query_one(f"#lane-{name}", ArmLane) for name in ARMS]
        assert all(lane.display and _within(app, lane, 120) for lane in lanes)
        xs = [lane.region.x for lane in lanes]
        assert xs == sorted(xs) and len(set(xs)) == 4
        assert all(lane.region.width >= 30 for lane in lanes)
        # the switcher is for one lane at a time: not shown
        assert not any(line.strip().startswith("lanes ← →") for line in screen_lines(app))
    # below 120 one lane at a time, as the page says
    app = LabApp(str(path), registry=fake_registry(), runs_dir=tmp_path / "runs")
    async with app.run_test(size=(119, 40)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, RunScreen))
        await pilot.pause()
        assert app.screen.tabbed


def _saved(tmp_path: Path, name: str, arms: str, prompts: tuple[str, ...] = ("prose", "code")) -> str:
    registry = fake_registry()
    profile = parse_profile(profile_toml(arms, name="demo", prompts=prompts), "demo.toml", registry)
    store = RunStore(profile, tmp_path / name)
    Runner(profile, registry, store).run()
    return str(store.path)


@pytest.mark.parametrize("size", [(120, 40), (100, 30), (80, 24)], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_compare_is_never_cut_on_the_right_and_says_what_gave_way(tmp_path: Path, size: tuple[int, int]) -> None:
    a, b = _saved(tmp_path, "a", QUICK), _saved(tmp_path, "b", QUICK)
    app = LabApp(None, registry=fake_registry(), runs_dir=tmp_path / "a", profiles_dir=tmp_path, compare=(a, b))
    async with app.run_test(size=size) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, CompareScreen))
        screen = app.screen
        await pilot.pause()
        table = screen.query_one("#compare-table")
        # no column scrolled out of sight: the table's content fits its width
        assert table.virtual_size.width <= table.scrollable_content_region.width, (table.virtual_size, size)
        shown = screen.shown_columns
        assert {"arm", "prompt", "tok_per_s_a", "tok_per_s_b", "speedup_a", "speedup_b", "verdict"} <= set(shown)
        if size[0] >= 100:
            assert "changed" in shown
        foot = str(screen.query_one(CompareFoot).render())
        hidden = [label for label, key in (("accept", "acceptance_rate"), ("cost", "step_cost_tokens"),
                                            ("peak", "peak_mem_bytes")) if f"{key}_a" not in shown]
        hidden += [] if "changed" in shown else ["changed"]
        if hidden:
            assert f"Not shown at this width: {', '.join(hidden)}" in " ".join(foot.split()), foot
        else:
            assert "Not shown" not in foot
    if size == (120, 40):
        assert "acceptance_rate_a" in shown  # the acceptance stays at 120 columns


async def _run_then_categories(pilot: Any, app: LabApp) -> CategoryTable:
    """Start the profile, let it finish (errors dismissed), open the per-category view."""
    await wait_until(pilot, lambda: isinstance(app.screen, RunScreen))
    await pilot.press("s")
    await run_finished(pilot)
    while type(app.screen).__name__ == "ErrorScreen":
        await pilot.press("escape")
        await pilot.pause()
    await pilot.press("3")
    await pilot.pause(0.3)
    return app.screen.query_one(CategoryTable)


async def test_at_80x24_the_per_category_view_shows_its_last_column_whole(tmp_path: Path) -> None:
    path = tmp_path / "suite.toml"
    path.write_text('[profile]\nname = "demo"\n[run]\nmax_tokens = 24\nrounds = 1\nwarmup = 0\n'
                    '[[prompts]]\nsuite = "speclab"\nper_category = 1\n' + QUICK, encoding="utf-8")
    app = LabApp(str(path), registry=fake_registry(), runs_dir=tmp_path / "runs")
    async with app.run_test(size=(80, 24)) as pilot:
        table = await _run_then_categories(pilot, app)
        assert table.row_count > 0
        assert table.shown_columns[-1] == "call" and {"arm", "category", "speedup"} <= set(table.shown_columns)
        assert table.virtual_size.width <= table.scrollable_content_region.width, table.virtual_size
        lines = screen_lines(app)
        head = next(line for line in lines if line.lstrip().startswith("arm ") and "category" in line)
        assert head.rstrip().endswith("call")
    # wide, nothing gives way
    app = LabApp(str(path), registry=fake_registry(), runs_dir=tmp_path / "runs")
    async with app.run_test(size=(160, 40)) as pilot:
        assert (await _run_then_categories(pilot, app)).shown_columns == [
            "arm", "category", "prompts", "accept", "mean_len", "speedup", "interval", "call"]


def test_lab_help_names_every_way_into_the_tui() -> None:
    text = build_parser().format_help()
    assert "lab RUN_DIR" in text and "lab --compare RUN_A RUN_B" in text and "lab [PROFILE.toml]" in text
    assert "lab report RUN_A --compare RUN_B" in text
