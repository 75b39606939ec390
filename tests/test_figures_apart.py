"""Figures can never take a report down: they are drawn after report.md,
results.json and `lab run`'s summary, in a process of their own
(lab.render.draw). A real SIGSEGV, a hang, a missing matplotlib and a lab
stopped or killed while drawing are each brought about in the drawing
process by a sitecustomize on its PYTHONPATH that replaces the speedup
figure's drawing; nothing in the product knows of it. The same hook is on
the lab's own path: were a figure drawn in the lab's process, the lab
would crash with it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import psutil
import pytest

pytest.importorskip("matplotlib", reason="figures need matplotlib (a base dependency: pip install -e .)")

from lab.render import draw, figures
from lab.render.report import load_for_report, write_report
from tests.fakes import BASE_AND_SPEC, profile_toml

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "results" / "first-command-cpu"
SPEEDUP = "Speedup by n_max: predicted, measured and held out"

# Replaces a drawing function of lab.render.figures (draw_speedup unless
# said) as the module is imported, in whichever process imports it.
_HOOK = """
import importlib.abc, importlib.machinery, os, signal, subprocess, sys, time

def replaced(*args, **kwargs):
{body}

class _Figures(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "lab.render.figures":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        load = spec.loader.exec_module
        def exec_module(module):
            load(module)
            setattr(module, {name!r}, replaced)
        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, _Figures())
"""
CRASH = "    os.kill(os.getpid(), signal.SIGSEGV)"
# deaf to SIGTERM, with a child of its own, both written down before it sleeps
HANG = """
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sleeper = subprocess.Popen(["sleep", "600"])
    with open({pids!r}, "a") as f:
        f.write(f"{{os.getpid()}} {{sleeper.pid}}\\n")
    while True:
        time.sleep(1)
"""
NO_MATPLOTLIB = "    pass\nsys.modules['matplotlib'] = None"

# `lab run` itself (lab.cli.main) with the scripted backend registered
_LAB_RUN = ("import sys; sys.path.insert(0, sys.argv[3]); from tests.fakes import fake_registry; "
            "from lab.cli import main; "
            "sys.exit(main(['run', sys.argv[1], '--out', sys.argv[2], '--quiet'], registry=fake_registry()))")


def _hooked(tmp: Path, body: str, name: str = "draw_speedup") -> dict[str, str]:
    """The environment whose Python processes load the hook."""
    where = tmp / "hook"
    where.mkdir(exist_ok=True)
    (where / "sitecustomize.py").write_text(_HOOK.format(body=body, name=name), encoding="utf-8")
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(where), str(ROOT), *([path] if path else [])])}


def _profile(tmp: Path) -> Path:
    p = tmp / "fake.toml"
    p.write_text(profile_toml(BASE_AND_SPEC, rounds=2), encoding="utf-8")
    return p


def _lab_run(tmp: Path, env: dict[str, str], **kw: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", _LAB_RUN, str(_profile(tmp)), str(tmp / "runs"), str(ROOT)],
                            cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _run_dir(tmp: Path) -> Path:
    (found,) = (tmp / "runs").iterdir()
    return found


def _section(md: str, title: str) -> str:
    return md.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def _running(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie no longer does)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _gone(pids: list[int], within_s: float = 20.0) -> bool:
    """Every pid ended (its reaping is its parent's: the lab's, or init's
    once the lab is gone)."""
    end = time.monotonic() + within_s
    while any(_running(p) for p in pids):
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def _pids(path: Path, within_s: float = 60.0) -> list[int]:
    """The hung drawing process's pid and its child's, once it wrote them."""
    end = time.monotonic() + within_s
    while not (path.is_file() and path.read_text().endswith("\n")):
        if time.monotonic() > end:
            raise AssertionError("the drawing process never reached the speedup figure")
        time.sleep(0.05)
    return [int(x) for x in path.read_text().split()]


@pytest.fixture
def pids(tmp_path: Path) -> Iterator[Path]:
    """Where the hung drawing writes its pids; whatever of them a failed
    test leaves running is killed at the end (the hang ignores SIGTERM,
    and so does the sleep it starts)."""
    path = tmp_path / "pids"
    yield path
    if path.is_file():
        for pid in (int(x) for x in path.read_text().split()):
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_native_crash_drawing_a_figure_costs_that_figure_only(tmp_path: Path) -> None:
    plain, crash = tmp_path / "plain", tmp_path / "crash"
    plain.mkdir(), crash.mkdir()
    ran = _lab_run(plain, {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})
    out_plain, err_plain = ran.communicate(timeout=300)
    assert ran.returncode == 0, err_plain
    ran = _lab_run(crash, _hooked(crash, CRASH))
    out_crash, err_crash = ran.communicate(timeout=300)
    # the lab itself did not crash, and its exit status is the run's
    assert ran.returncode == 0, err_crash
    a, b = _run_dir(plain), _run_dir(crash)
    # the summary on stdout is whole: the same table (the headline on the machine's load and the path aside)
    def table(out: str) -> list[str]:
        return [line for line in out.splitlines() if line.strip() and not line.startswith(("saved: ", "⚠ "))]

    assert "spec" in out_crash and "saved: " in out_crash
    assert table(out_crash) == table(out_plain)
    assert "lab: figures: the drawing process died of SIGSEGV" in err_crash
    # results.json and report.md hold the run
    rows = json.loads((b / "results.json").read_text())["results"]
    assert [r["status"] for r in rows] == [r["status"] for r in json.loads((a / "results.json").read_text())["results"]]
    md_a, md_b = (a / "report.md").read_text(), (b / "report.md").read_text()
    assert "## Detail\n" in md_b  # its peak memory is the process's own
    for title in ("Why: the step arithmetic", "Acceptance per draft position", "Statistics", "Greedy equivalence"):
        assert _section(md_b, title) == _section(md_a, title)
    # the speedup figure is named with the crash; a fresh process drew the rest
    figs = _section(md_b, "Figures")
    assert f"- {SPEEDUP}: the drawing process died of SIGSEGV while drawing it" in figs.split("Not drawn:", 1)[1]
    drawn_plain = sorted(p.name for p in (a / figures.FIGURE_DIR).iterdir())
    assert "speedup.svg" in drawn_plain and "drawing process" not in _section(md_a, "Figures")
    assert sorted(p.name for p in (b / figures.FIGURE_DIR).iterdir()) == sorted(
        [n for n in drawn_plain if not n.startswith("speedup.")] + [draw.LOG_FILE])
    # the log says where it crashed
    log = (b / figures.FIGURE_DIR / draw.LOG_FILE).read_text()
    assert "Segmentation fault" in log and "in _draw" in log
    assert "its output is in figures/draw.log" in figs
    # what report.md said before the figures were drawn is gone once they were
    assert report_pending() not in md_b


def report_pending() -> str:
    from lab.render.report import FIGURES_PENDING

    return FIGURES_PENDING[0]


def test_a_hung_drawing_is_killed_at_its_limit_and_reaped(tmp_path: Path, pids: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    shutil.copytree(DEMO, run)
    for key, value in _hooked(tmp_path, HANG.format(pids=str(pids))).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(draw, "LIMIT_S", 6.0)  # time enough to reach the speedup figure on a busy machine
    md = write_report(run).read_text()
    drawing, sleeper = _pids(pids, within_s=0)
    # the drawing process was reaped by the lab before it went on; what it started ended with it
    assert not psutil.pid_exists(drawing)
    assert _gone([sleeper])
    figs = _section(md, "Figures").split("Not drawn:", 1)[1]
    assert f"- {SPEEDUP}: the drawing process timed out after 6 s and was stopped while drawing it" in figs
    assert "- Verify cost T(w) against w: not reached (the drawing process timed out after 6 s" in figs
    assert not list((run / figures.FIGURE_DIR).glob("*.svg"))
    assert "## Detail" in md and report_pending() not in md


def test_no_matplotlib_in_the_drawing_process_names_every_figure(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in _hooked(tmp_path, NO_MATPLOTLIB).items():
        monkeypatch.setenv(key, value)
    out = draw.render(load_for_report(DEMO), ("svg",))
    assert out.drawn == ()
    assert len(out.left_out) == 7
    assert all("matplotlib could not be imported" in line for line in out.left_out)
    assert out.stopped is not None and out.stopped.startswith("matplotlib could not be imported")


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGKILL"])
def test_a_lab_stopped_while_drawing_leaves_no_drawing_process(tmp_path: Path, pids: Path, stop: str) -> None:
    lab = _lab_run(tmp_path, _hooked(tmp_path, HANG.format(pids=str(pids))))
    try:
        hung = _pids(pids)
        lab.send_signal(getattr(signal, stop))
        out, err = lab.communicate(timeout=60)
    finally:
        if lab.poll() is None:
            lab.kill()
            lab.wait()
    # SIGTERM: the lab stops the drawing itself; SIGKILL: the drawing process ends when its stdin does
    assert _gone(hung), f"left running: {hung}"
    assert lab.returncode == (143 if stop == "SIGTERM" else -signal.SIGKILL)
    # everything before the figures was out already
    assert "spec" in out and "saved: " in out
    md = (_run_dir(tmp_path) / "report.md").read_text()
    assert "## Detail" in md and report_pending() in md
    if stop == "SIGTERM":
        assert "terminated (SIGTERM) while drawing figures" in err


@pytest.mark.slow
def test_a_figure_that_fails_to_draw_costs_that_figure_never_report_md(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    shutil.copytree(DEMO, run)
    for key, value in _hooked(tmp_path, "    raise AttributeError('a drawing bug')", "draw_acceptance").items():
        monkeypatch.setenv(key, value)
    report = write_report(run).read_text()
    assert "Acceptance per draft position: could not be drawn (AttributeError: a drawing bug)" in report
    assert (run / figures.FIGURE_DIR / "speedup.svg").is_file()
    # an exception is no crash: the process ended well, and kept no log
    assert "Drawing stopped" not in report and not (run / figures.FIGURE_DIR / draw.LOG_FILE).exists()

    def hopeless(*_: object, **__: object) -> object:
        raise RuntimeError("no figures today")

    monkeypatch.setattr(draw, "write", hopeless)
    report = write_report(run).read_text()
    assert "No figures: drawing failed (RuntimeError: no figures today)." in report
    assert "## Detail" in report


@pytest.mark.slow
def test_a_figure_file_that_is_a_symlink_is_replaced_not_written_through(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(DEMO, run)
    outside = tmp_path / "outside.svg"
    outside.write_text("not the lab's")
    (run / figures.FIGURE_DIR / "speedup.svg").unlink()
    (run / figures.FIGURE_DIR / "speedup.svg").symlink_to(outside)
    write_report(run)
    assert outside.read_text() == "not the lab's"
    svg = run / figures.FIGURE_DIR / "speedup.svg"
    assert not svg.is_symlink() and svg.read_bytes().lstrip().startswith(b"<?xml")
