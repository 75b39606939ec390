"""Snapshots of the run screen, the comparison table and the plugins screen.

Everything shown is fixed: the run screen is fed a scripted event sequence
through the same bridge the runner feeds (fixed timestamps and memory) and
shows the rows of its Finished events as it shows a session's, the
comparison comes from a saved run whose memory figures are pinned, and the
plugins screen lists test-defined plugins. Update with
``pytest tests/tui/test_snapshots.py --snapshot-update`` and look at the SVGs.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from lab.api import Draft, Drafter, Option
from lab.base.events import (
    Cell,
    Finished,
    MemorySample,
    RunStarted,
    Status,
    StatusChanged,
    StepEvent,
    TokenEvent,
    arm_cell,
)
from lab.profile.load import parse_profile
from lab.registry import LoadError, Registry
from lab.rows.build import build_result
from lab.runner import RunControl, Runner
from lab.store import RunStore
from lab.tui.app import LabApp
from lab.tui.bridge import EventBridge
from lab.tui.screens.run import RunScreen
from tests.fakes import BASE_AND_SPEC, FakeBackend, fake_registry, profile_toml
from tests.tui.helpers import wait_until

SIZE = (140, 45)
WORDS = "the keeper climbed the stair at dusk and lit the lamp that ships would look for".split()

SWEEP_PROFILE = """
[[arms]]
name = "base"
backend = "fake"
options = { virtual_clock = true }

[[arms]]
name = "spec"
backend = "fake"
n_max = [2, 4]
options = { speculative = true, virtual_clock = true }

[[arms]]
name = "oomer"
backend = "fake"
options = { mode = "oom" }
"""


def _scripted_events(profile: Any) -> list[Any]:
    """base finished, spec-nmax2 mid-stream, spec-nmax4 loading, oomer failed."""
    events: list[Any] = [RunStarted(profile.name, "", tuple(a.name for a in profile.arms), ("prose",), 1, t=0.0)]
    base_cell = Cell("base", "prose", 1)
    events += [StatusChanged(arm_cell("base"), Status.LOADING, phase="reading weights", progress=0.5, t=0.0),
               MemorySample("base", 120 * 2**20, t=0.0),
               StatusChanged(base_cell, Status.RUNNING, t=0.0)]
    text = ""
    for i in range(24):
        piece = WORDS[i % len(WORDS)] + " "
        text += piece
        events.append(TokenEvent(base_cell, piece, (i,), False, t=1.0 + i * 0.01))
    base_row = build_result(arm=profile.arm("base"), prompt="prose", round=1, status="ok", n_tokens=24,
                            gen_s=0.23, prompt_tokens=8, prompt_s=0.01, text=text, peak_mem_bytes=130 * 2**20)
    events += [Finished(base_cell, base_row), StatusChanged(arm_cell("base"), Status.OK)]
    spec = profile.arm("spec-nmax2")
    cell = Cell(spec.name, "prose", 1)
    events += [StatusChanged(arm_cell(spec.name), Status.LOADING, phase="creating context", progress=1.0, t=2.0),
               MemorySample(spec.name, 140 * 2**20, t=2.0),
               StatusChanged(cell, Status.RUNNING, t=2.0),
               TokenEvent(cell, "the ", (0,), False, t=3.0)]
    t, i = 3.0, 1
    for step, acc in enumerate([2, 1, 0, 2, 2, 1], start=1):
        for j in range(acc):
            events.append(TokenEvent(cell, WORDS[(i + j) % len(WORDS)] + " ", (i + j,), True, t=t))
        i += acc
        t += 0.016
        events.append(TokenEvent(cell, WORDS[i % len(WORDS)] + " ", (i,), False, t=t))
        i += 1
        events.append(StepEvent(cell, step, drafted=2, accepted=acc, landed=acc + 1, draft_s=0.004,
                                verify_s=0.012, step_s=0.016, t=t))
    events.append(MemorySample(spec.name, 150 * 2**20, t=t))
    events.append(StatusChanged(arm_cell("spec-nmax4"), Status.PENDING, t=t))
    oom_row = build_result(arm=profile.arm("oomer"), prompt="prose", round=1, status="oom",
                           detail="fake: out of memory allocating the KV cache")
    events += [Finished(Cell("oomer", "prose", 1), oom_row),
               StatusChanged(arm_cell("oomer"), Status.OOM, detail="fake: out of memory")]
    return events


class _ScriptedSession:
    """What the run screen reads of a session whose events are fed by hand:
    the rows its Finished events carry (a runner's rows()); nothing runs."""

    running = False
    run_dir = None

    def __init__(self, events: list[Any]) -> None:
        self._rows = tuple(e.result for e in events if isinstance(e, Finished))

    def rows(self) -> tuple[Any, ...]:
        return self._rows


@pytest.mark.slow
def test_run_screen_live(snap_compare: Any, tmp_path: Path) -> None:
    path = tmp_path / "sweep.toml"
    path.write_text(profile_toml(SWEEP_PROFILE, name="sweep"), encoding="utf-8")
    registry = fake_registry()
    profile = parse_profile(path.read_text(), str(path), registry)
    app = LabApp(str(path), registry=registry, runs_dir=tmp_path / "runs")

    async def run_before(pilot: Pilot[Any]) -> None:
        screen = app.screen
        assert isinstance(screen, RunScreen)
        bridge = EventBridge(screen.post_message, RunControl())
        events = _scripted_events(profile)
        screen.session = _ScriptedSession(events)  # type: ignore[assignment]
        for event in events:
            bridge(event)
        bridge._stop.set()
        bridge.flush()
        await wait_until(pilot, lambda: screen.lane("spec-nmax2").text.text.count(" ") >= 15)
        await wait_until(pilot, lambda: screen.lane("oomer").status.value == "oom")
        app._errors.clear()  # the failure modal has its own test; show the screen under it
        if type(app.screen).__name__ == "ErrorScreen":
            app.pop_screen()
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def _saved_run(tmp_path: Path) -> Path:
    registry = fake_registry()
    profile = parse_profile(profile_toml(BASE_AND_SPEC, name="saved", rounds=2, prompts=("prose", "code")),
                            "saved.toml", registry)
    store = RunStore(profile, tmp_path / "tmp-runs")
    Runner(profile, registry, store).run()
    fixed = tmp_path / "runs" / "20260101-000000-saved"
    shutil.copytree(store.path, fixed)
    data = json.loads((fixed / "results.json").read_text())
    for row in data["results"]:
        row["peak_mem_bytes"] = (100 if row["arm"] == "base" else 110) * 2**20  # RSS is not reproducible
        row["contended"] = False  # nor is what else the machine was doing
        for key in ("ttft_s", "itl_p50_s", "itl_p95_s", "itl_p99_s"):  # nor the wall clock's latency
            if row.get(key) is not None:
                row[key] = 0.01
    (fixed / "results.json").write_text(json.dumps(data))
    return fixed


def test_comparison_table_of_a_saved_run(snap_compare: Any, tmp_path: Path, monkeypatch: Any) -> None:
    _saved_run(tmp_path)
    monkeypatch.chdir(tmp_path)
    app = LabApp(None, registry=fake_registry(), runs_dir="runs", profiles_dir=".",
                 saved_run="runs/20260101-000000-saved")

    async def run_before(pilot: Pilot[Any]) -> None:
        await wait_until(pilot, lambda: isinstance(app.screen, RunScreen))
        app.screen.query_one("#comparison").focus()
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_plots_of_a_saved_run(snap_compare: Any, tmp_path: Path, monkeypatch: Any) -> None:
    _saved_run(tmp_path)
    monkeypatch.chdir(tmp_path)
    app = LabApp(None, registry=fake_registry(), runs_dir="runs", profiles_dir=".",
                 saved_run="runs/20260101-000000-saved")

    async def run_before(pilot: Pilot[Any]) -> None:
        await wait_until(pilot, lambda: isinstance(app.screen, RunScreen))
        await pilot.press("right")
        app.screen.query_one("#bottom").active = "tab-plots"
        await pilot.pause(0.3)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


class _LookupDrafter(Drafter):
    name = "lookup"
    description = "test drafter: repeats the last token"
    options = (Option("depth", int, 2, "how far back"),)

    def draft(self, context: Any, k: int) -> Draft:
        return Draft(tuple(context[-1:]) * k)


class _EchoBackend(FakeBackend):
    # its own options, so that changes to tests.fakes leave this snapshot alone
    name = "echo"
    description = "test backend: a scripted stream"
    options = (Option("speculative", bool, False, "draft"), Option("mode", str, "ok", "failure mode"))


def test_plugins_screen(snap_compare: Any, tmp_path: Path) -> None:
    registry = Registry(
        backends={"echo": _EchoBackend}, drafters={"lookup": _LookupDrafter},
        origins={"backend:echo": "tests.snapshots", "drafter:lookup": "tests.snapshots"},
        errors=[LoadError("broken", "lab.backends", "ImportError: No module named 'engine_that_is_not_there'")],
    )
    app = LabApp(None, registry=registry, runs_dir=tmp_path / "runs", profiles_dir=tmp_path)

    async def run_before(pilot: Pilot[Any]) -> None:
        await pilot.press("f2")
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)
