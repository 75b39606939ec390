"""The live view's repaint rate, weighed against the engine's threads."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.base.events import Status, StatusChanged, arm_cell
from lab.base.machine import available_cores
from lab.profile.load import parse_profile
from lab.registry import Registry
from lab.tui.cadence import FULL_TEXT_HZ, LEAN_TEXT_HZ, cadence_for
from lab.tui.session import RunSession
from tests.fakes import fake_registry, profile_toml


def test_full_rate_when_a_core_is_left_for_the_ui() -> None:
    for busy, cores in ((1, 2), (4, 8), (7, 8)):
        c = cadence_for(busy, cores=cores)
        assert c.text_hz == FULL_TEXT_HZ and c.reason == ""


def test_lean_rate_when_the_engine_keeps_every_core_busy() -> None:
    for busy, cores in ((2, 2), (16, 16), (16, 8)):
        c = cadence_for(busy, cores=cores)
        assert c.text_hz == LEAN_TEXT_HZ < FULL_TEXT_HZ
        assert c.metrics_hz < c.text_hz
        assert f"all {cores} cores" in c.reason


def test_a_forced_rate_wins_and_is_named_when_below_full() -> None:
    assert cadence_for(2, cores=2, text_hz=60).text_hz == 60
    assert cadence_for(2, cores=2, text_hz=60).reason == ""
    slow = cadence_for(1, cores=8, text_hz=2)
    assert slow.text_hz == 2 and slow.metrics_hz <= 2 and "set" in slow.reason


def test_engines_say_how_many_cores_they_keep_busy() -> None:
    from lab.registry import load_registry

    registry = load_registry()
    cores = available_cores()
    llamacpp = registry.backend("llamacpp")
    assert llamacpp.busy_cores({}, 0) == cores  # the default: a thread per core
    assert llamacpp.busy_cores({}, 1) == 1
    assert llamacpp.busy_cores({"n_gpu_layers": 99}, 0) == 1  # the GPU computes, the CPU waits
    server = registry.backend("llamacpp-server")
    assert server.busy_cores({}, 3) == 3 and server.busy_cores({"n_gpu_layers": 999}, 0) == 1


def _session(tmp_path: Path, registry: Registry, arms: str, threads: int, refresh_hz: float | None = None) -> RunSession:
    text = profile_toml(arms).replace("[run]\n", f"[run]\nthreads = {threads}\n", 1)
    profile = parse_profile(text, "p.toml", registry)
    return RunSession(profile, registry, tmp_path, lambda m: None, refresh_hz=refresh_hz)


def test_the_bridge_takes_each_arms_cadence_when_it_starts(tmp_path: Path) -> None:
    registry = fake_registry()
    every = available_cores()
    arms = (f'[[arms]]\nname = "a"\nbackend = "fake"\noptions = {{ busy_cores = {every} }}\n\n'
            '[[arms]]\nname = "b"\nbackend = "fake"\n')
    forced = _session(tmp_path, registry, arms, threads=0, refresh_hz=12)
    assert set(forced.cadences()) == {"a", "b"}
    forced.bridge(StatusChanged(arm_cell("a"), Status.LOADING))
    assert forced.bridge.interval == 1 / 12 and forced.cadence.reason == "view 12 Hz, set"

    session = _session(tmp_path, registry, arms, threads=0)
    assert session.bridge.cadences["b"] == cadence_for(0)  # an engine that leaves the CPU idle
    session.bridge(StatusChanged(arm_cell("a"), Status.LOADING))
    lean = cadence_for(every, cores=every)
    assert session.cadence == lean
    assert session.bridge.interval == 1 / lean.text_hz
    assert session.bridge.metrics_interval == 1 / lean.metrics_hz
    session.bridge(StatusChanged(arm_cell("b"), Status.LOADING))
    assert session.bridge.interval == 1 / FULL_TEXT_HZ and session.cadence.reason == ""


@pytest.mark.anyio
async def test_the_run_header_names_a_reduced_rate_while_running(tmp_path: Path) -> None:
    from lab.tui.app import LabApp
    from lab.tui.screens.run import RunScreen
    from tests.tui.helpers import run_finished, wait_until

    path = tmp_path / "profile.toml"
    path.write_text(profile_toml('[[arms]]\nname = "slow"\nbackend = "fake"\noptions = { token_delay_s = 0.01 }\n',
                                 max_tokens=200), encoding="utf-8")
    app = LabApp(str(path), registry=fake_registry(), runs_dir=tmp_path / "runs", refresh_hz=2)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, RunScreen)
        assert "view 2 Hz" not in screen._header_text()
        await pilot.press("s")
        await wait_until(pilot, lambda: screen.lane("slow").text.text != "", what="text to land")
        assert "view 2 Hz, set" in screen._header_text()
        await pilot.press("x")
        await run_finished(pilot)
        assert "view 2 Hz" not in screen._header_text()


def test_lab_passes_refresh_hz_to_the_app_and_refuses_nonsense(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    import lab.tui.app
    from lab.cli import main

    opened: list[tuple[str, float | None]] = []
    monkeypatch.setattr(lab.tui.app, "run_app", lambda path, hz=None: opened.append((path, hz)) or 0)
    profile = tmp_path / "p.toml"
    profile.write_text("", encoding="utf-8")
    assert main(["--refresh-hz", "12", str(profile)]) == 0
    assert main([str(profile)]) == 0
    assert opened == [(str(profile), 12.0), (str(profile), None)]
    assert main(["--refresh-hz", "0", str(profile)]) == 2
    assert "--refresh-hz" in capsys.readouterr().err
    assert main(["--refresh-hz", "5", str(tmp_path / "missing.toml")]) == 2
    assert "no such profile" in capsys.readouterr().err
    assert len(opened) == 2
