"""Finished cells looked at from the table (each with its difference from
the baseline's text), two saved runs side by side, and live GPU readings in
the lanes: pilot tests with the scripted fake backend."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable

from lab.analysis.compare import compare
from lab.base.events import now
from lab.profile.load import parse_profile
from lab.runner import Runner
from lab.store import RunStore, load_run
from lab.telemetry import gpu
from lab.tui.app import LabApp
from lab.tui.screens.compare import CompareScreen
from lab.tui.screens.picker import PickerScreen
from lab.tui.screens.run import RunScreen
from lab.tui.widgets.cell_diff import CHANGED_STYLE, CellDiff, DiffCaption, diff_text
from lab.tui.widgets.comparison import ComparisonTable, row_key
from tests.fakes import fake_registry, profile_toml
from tests.tui.helpers import run_finished, wait_until

pytestmark = pytest.mark.anyio
SIZE = (140, 45)

# the spec arm says something else from its fifth word on
DIVERGING = """
[[arms]]
name = "base"
backend = "fake"
options = { virtual_clock = true, text = "one two three four five six seven eight nine ten" }

[[arms]]
name = "spec"
backend = "fake"
n_max = 4
options = { speculative = true, accepted = [3, 1], virtual_clock = true, text = "one two three four FIVE six seven eight nine ten" }
"""


def _saved_run(tmp_path: Path, arms: str, name: str = "fake", **kw: Any) -> Path:
    registry = fake_registry()
    profile = parse_profile(profile_toml(arms, name=name, **kw), f"{name}.toml", registry)
    store = RunStore(profile, tmp_path / "runs")
    Runner(profile, registry, store).run()
    return Path(store.path)


def _common_prefix(a: str, b: str) -> int:
    return len(os.path.commonprefix([a, b]))


def test_diff_text_leaves_the_common_prefix_plain_and_marks_what_differs() -> None:
    text, base = "the cat sat on the mat", "the cat lay on the mat"
    out = diff_text(text, base)
    at = _common_prefix(text, base)
    assert out.plain.replace("▶", "", 1) == text
    # nothing before the divergence is styled; from it on, the part of the
    # changed word the baseline lacks is
    assert all(span.end <= at or span.start >= at for span in out.spans)
    changed = "".join(out.plain[s.start:s.end] for s in out.spans if s.style == CHANGED_STYLE)
    assert changed == text[at:].split(" ")[0]
    assert diff_text(base, base).plain == base and not diff_text(base, base).spans


async def test_a_saved_runs_cell_is_viewed_with_its_diff_from_the_baseline(tmp_path: Path) -> None:
    run_dir = _saved_run(tmp_path, DIVERGING, max_tokens=30, rounds=2, prompts=("prose", "code"))
    results = load_run(run_dir)["results"]

    def saved(arm: str, prompt: str, rnd: int) -> dict[str, Any]:
        return next(r for r in results if (r["arm"], r["prompt"], r["round"]) == (arm, prompt, rnd))

    app = LabApp(None, registry=fake_registry(), runs_dir=tmp_path / "runs", profiles_dir=tmp_path, saved_run=run_dir)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, RunScreen))
        screen = app.screen
        assert isinstance(screen, RunScreen)
        table = screen.query_one(ComparisonTable)
        keys = table.lines()
        # select the spec · prose row: the spec lane shows that cell, not the last one (code)
        table.move_cursor(row=keys.index(row_key("spec", "prose")))
        await pilot.pause()
        assert screen.viewed == ("spec", "prose", 2)
        assert screen.arms[screen.selected].name == "spec"
        lane = screen.lane("spec")
        want, base = saved("spec", "prose", 2)["text"], saved("base", "prose", 2)["text"]
        assert want != base
        assert lane.text.text == want
        at = _common_prefix(want, base)
        caption = str(lane.query_one(DiffCaption).render())
        assert f"differs from base at char {at}" in caption
        diff = lane.query_one(CellDiff)
        assert diff.display and not lane.text.display
        assert diff.diff is not None and diff.diff.plain.replace("▶", "", 1) == want
        assert all(s.start >= at for s in diff.diff.spans)
        assert any(s.style == CHANGED_STYLE for s in diff.diff.spans)
        # r steps to the cell's other round
        await pilot.press("r")
        assert screen.viewed == ("spec", "prose", 1)
        assert lane.text.text == saved("spec", "prose", 1)["text"]
        assert "prose r1" in str(screen.query_one("#lane-spec .status").render())
        # the baseline's own row: its text, no diff
        table.move_cursor(row=keys.index(row_key("base", "code")))
        await pilot.pause()
        assert screen.viewed == ("base", "code", 2)
        assert screen.lane("base").text.text == saved("base", "code", 2)["text"]
        assert not screen.lane("base").query_one(DiffCaption).display


async def test_identical_cells_keep_their_drafted_text_and_say_identical(tmp_path: Path) -> None:
    same = DIVERGING.replace("FIVE", "five")
    run_dir = _saved_run(tmp_path, same, max_tokens=30)
    app = LabApp(None, registry=fake_registry(), runs_dir=tmp_path / "runs", profiles_dir=tmp_path, saved_run=run_dir)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, RunScreen))
        screen = app.screen
        table = screen.query_one(ComparisonTable)
        table.move_cursor(row=table.lines().index(row_key("spec", "prose")))
        await pilot.pause()
        lane = screen.lane("spec")
        assert "identical to base" in str(lane.query_one(DiffCaption).render())
        assert lane.text.display and not lane.query_one(CellDiff).display
        assert lane.text.drafted_chars > 0


def _rows_of(table: DataTable[Any]) -> list[list[str]]:
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


async def test_two_runs_side_by_side_say_what_report_compare_says(tmp_path: Path) -> None:
    a = _saved_run(tmp_path, DIVERGING, name="alpha", max_tokens=30)
    slower = DIVERGING.replace("accepted = [3, 1]", "accepted = [0]")
    b = _saved_run(tmp_path, slower, name="beta", max_tokens=30)
    want = compare(load_run(a), load_run(b))
    app = LabApp(None, registry=fake_registry(), runs_dir=tmp_path / "runs", profiles_dir=tmp_path,
                 compare=(str(a), str(b)))
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, CompareScreen))
        screen = app.screen
        table = screen.query_one(DataTable)
        rows = _rows_of(table)
        assert [(r[0], r[1]) for r in rows] == [(w["arm"], w["prompt"]) for w in want]
        spec = next(w for w in want if w["arm"] == "spec")
        shown = rows[[w["arm"] for w in want].index("spec")]
        assert f"{spec['speedup_a']:.2f}x" in shown and any(c.startswith(f"{spec['speedup_b']:.2f}x") for c in shown)
        assert spec["changed"] and shown[7] == ", ".join(spec["changed"])
        # the profiles differ (the spec arm's options): the warning is up front
        caption = str(screen.query_one("#compare-caption").render())
        assert "alpha" in caption and "beta" in caption and "profiles differ" in caption
        # the foot leads with the report's conclusion and says what counts as a change, as the report does
        foot = str(screen.query_one("#compare-foot").render())
        from lab.analysis.compare import conclusion, count_line

        data_a, data_b = load_run(a), load_run(b)
        assert conclusion(data_a, data_b, want)[:60] in foot and count_line(want)[:60] in foot
        assert "95%" not in foot
        await pilot.press("escape")
        assert isinstance(app.screen, PickerScreen)


async def test_compare_is_reachable_from_a_saved_run(tmp_path: Path) -> None:
    a = _saved_run(tmp_path, DIVERGING, name="alpha", max_tokens=30)
    b = _saved_run(tmp_path, DIVERGING, name="beta", max_tokens=30)
    app = LabApp(None, registry=fake_registry(), runs_dir=tmp_path / "runs", profiles_dir=tmp_path, saved_run=a)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, RunScreen))
        await pilot.press("m")
        await wait_until(pilot, lambda: isinstance(app.screen, PickerScreen))
        picker = app.screen
        assert isinstance(picker, PickerScreen) and picker.runs_only
        assert all(kind == "run" for kind, _ in picker.choices.values())
        key = next(k for k, (_, path) in picker.choices.items() if Path(path) == b)
        picker.dismiss(picker.choices[key])
        await wait_until(pilot, lambda: isinstance(app.screen, CompareScreen))
        assert (app.screen.dir_a, app.screen.dir_b) == (str(a), str(b))


def test_the_cli_refuses_a_compare_of_a_folder_that_is_no_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from lab.cli import main

    assert main(["--compare", str(tmp_path), str(tmp_path)]) == 2
    assert "not a saved run directory" in capsys.readouterr().err


def test_lab_compare_opens_the_tui_on_both_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import lab.tui.app
    from lab.cli import main

    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        (d / "results.json").write_text("{}")
    opened: list[Any] = []
    monkeypatch.setattr(lab.tui.app, "run_app", lambda path, hz=None, compare=None: opened.append(compare) or 0)
    assert main(["--compare", str(a), str(b)]) == 0
    assert opened == [(str(a), str(b))]


class Card:
    """A scripted GPU: 2 GiB held by the lab's process, 90 % busy, 300 W."""

    source = "recorded"

    def __init__(self) -> None:
        self.t0 = now()
        self._lock = threading.Lock()

    def read(self) -> list[gpu.GpuSample]:
        t = now()
        return [gpu.GpuSample(
            t=t, index=0, name="NVIDIA H200", memory_used_bytes=3 << 30, memory_total_bytes=141 << 30,
            utilization_pct=90.0, power_w=300.0, energy_j=300.0 * (t - self.t0), process_bytes={os.getpid(): 2 << 30},
        )]

    def close(self) -> None:
        pass


async def test_gpu_readings_show_live_in_the_running_lane(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu, "open_reader", lambda: Card())
    monkeypatch.setattr(gpu, "EMIT_INTERVAL_S", 0.0)
    arms = """
[[arms]]
name = "base"
backend = "fake"
options = { token_delay_s = 0.02 }
"""
    path = tmp_path / "profile.toml"
    path.write_text(profile_toml(arms, max_tokens=30), encoding="utf-8")
    app = LabApp(str(path), registry=fake_registry(), runs_dir=tmp_path / "runs")
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, RunScreen)
        lane = screen.lane("base")
        assert lane.gpu is None and "gpu" not in str(lane.query_one("LaneMetrics").render())
        await pilot.press("s")
        await wait_until(pilot, lambda: lane.gpu is not None, what="a GPU reading in the lane")
        figures = str(lane.query_one("LaneMetrics").render())
        assert "gpu 2.0/141 GiB" in figures and "util 90%" in figures and "300 W" in figures
        await run_finished(pilot)
        await pilot.press("q")


@pytest.mark.slow
async def test_a_finished_live_runs_cells_follow_the_comparison_table_only(tmp_path: Path) -> None:
    path = tmp_path / "profile.toml"
    path.write_text(profile_toml(DIVERGING, max_tokens=30, prompts=("prose", "code")), encoding="utf-8")
    app = LabApp(str(path), registry=fake_registry(), runs_dir=tmp_path / "runs")
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, RunScreen)
        await pilot.press("s")
        await run_finished(pilot)
        await pilot.pause(0.2)
        # the lanes still show what streamed last; the rebuilt tables did not move them
        assert screen.viewed is None
        streamed = screen.lane("spec").text.text
        screen.action_show_tab("tab-categories")
        await pilot.pause()
        from lab.tui.widgets.categories import CategoryTable

        cats = screen.query_one(CategoryTable)
        cats.move_cursor(row=max(0, cats.row_count - 1))
        await pilot.pause()
        assert screen.viewed is None and screen.lane("spec").text.text == streamed
        screen.action_show_tab("tab-comparison")
        table = screen.query_one(ComparisonTable)
        table.move_cursor(row=table.lines().index(row_key("spec", "prose")))
        await pilot.pause()
        assert screen.viewed == ("spec", "prose", 1)
        rows = screen.rows()
        want = next(r for r in rows if (r.arm, r.prompt) == ("spec", "prose")).text
        assert screen.lane("spec").text.text == want
        assert "differs from base" in str(screen.lane("spec").query_one(DiffCaption).render())
        await pilot.press("q")
