"""The noise guard (lab.telemetry.contention) on real processes: CPU burners this test
starts and stops itself, real runs of the embedded model beside them, and
two real runs started at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest

from lab.base import economics as breakeven
from lab.base.machine import available_cores
from lab.base.verdict import judge
from lab.telemetry import contention
from lab.telemetry.contention import ContentionWatcher

BURN = "import time\nend = time.time() + {s}\nwhile time.time() < end:\n    pass\n"


@contextmanager
def foreign_burners(n: int, seconds: float) -> Iterator[list[int]]:
    """``n`` busy loops that are not this process's descendants (a shell
    starts them in the background and exits, so they are reparented), as a
    neighbour's processes would be: each in a session of its own, as programs
    started from other terminals are (where the kernel shares the cores
    between sessions, autogroup, a burner in this test's session would
    compete only with the test, not with the lab's arm process, which has a
    session of its own). Bounded by ``seconds`` and killed on the way out by
    their pids."""
    script = " ".join(f'"{sys.executable}" -c "import os; os.setsid(); exec(os.environ[\'BURN\'])" '
                      ">/dev/null 2>&1 & echo $!;" for _ in range(n))
    out = subprocess.run(["sh", "-c", script], env={**os.environ, "BURN": BURN.format(s=seconds)},
                         capture_output=True, text=True, timeout=30, check=True).stdout
    pids = [int(x) for x in out.split()]
    assert len(pids) == n
    try:
        yield pids
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@contextmanager
def own_burners(n: int, seconds: float) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs = [subprocess.Popen([sys.executable, "-c", BURN.format(s=seconds)]) for _ in range(n)]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _cpu_s(pids: list[int]) -> float:
    import psutil

    total = 0.0
    for pid in pids:
        t = psutil.Process(pid).cpu_times()
        total += t.user + t.system
    return total


@pytest.mark.slow
def test_other_processes_count_and_the_lab_s_own_do_not() -> None:
    cores = os.cpu_count() or 1
    with ContentionWatcher("t", engine_cores=cores, interval=0.1) as w:
        with own_burners(2, 10) as procs:
            pids = [p.pid for p in procs]
            m, cpu0 = w.mark(), _cpu_s(pids)
            time.sleep(2.0)
            cpu1 = _cpu_s(pids)
            mine = w.reading(m)
        with foreign_burners(2, 10) as foreign:
            time.sleep(0.3)
            m, cpu0f = w.mark(), _cpu_s(foreign)
            time.sleep(2.0)
            cpu1f = _cpu_s(foreign)
            theirs = w.reading(m)
    burned = (cpu1 - cpu0) / mine.seconds
    burned_f = (cpu1f - cpu0f) / theirs.seconds
    assert burned > 0.05 and burned_f > 0.05
    # our own children's work is ours, never others'; the neighbour's is theirs
    assert mine.own_cores >= burned - 0.1
    assert mine.others_cores + mine.own_cores <= cores + 0.3
    assert theirs.others_cores >= burned_f - 0.1
    assert theirs.own_cores < 0.3  # this test process itself only sleeps
    # a neighbour's two busy loops (or the machine's other load) make a busy machine
    assert theirs.contended
    assert "other processes used" in theirs.note()


def test_the_threshold_is_beyond_the_engine_s_spare_cores() -> None:
    quiet = contention.Contention(others_cores=0.3, spare_cores=0.0, seconds=1.0)
    busy = contention.Contention(others_cores=1.0, spare_cores=0.0, seconds=1.0)
    spare = contention.Contention(others_cores=1.0, spare_cores=1.0, seconds=1.0)
    throttled = contention.Contention(others_cores=0.0, spare_cores=0.0, seconds=1.0, throttled=True)
    assert not quiet.contended and busy.contended and not spare.contended and throttled.contended


def test_an_engine_queued_for_its_core_is_contended_under_the_busy_limit() -> None:
    # readings taken on 2 cores: a one-thread engine beside two burners (others
    # under spare + BUSY_CORES, yet the engine waits for a core a third of the
    # time) and beside one neighbour on its spare core (no wait to speak of)
    squeezed = contention.Contention(others_cores=1.27, spare_cores=1.0, seconds=0.9,
                                     waiting_cores=0.46, own_cores=0.71, cores=2)
    beside = contention.Contention(others_cores=1.0, spare_cores=1.0, seconds=0.9,
                                   waiting_cores=0.06, own_cores=0.99, cores=2)
    own_threads = contention.Contention(others_cores=0.05, spare_cores=0.0, seconds=0.9,
                                        waiting_cores=0.6, own_cores=1.6, cores=2)
    assert squeezed.contended and not beside.contended and not own_threads.contended


PROFILE = """
[profile]
name = "busy"

[run]
max_tokens = 16
rounds = 1
warmup = 0
probe = false

[[prompts]]
name = "code"
text = "Write a Python function that reverses a linked list."

[[arms]]
name = "baseline"
backend = "llamacpp"
model = "embedded:smollm2"

[[arms]]
name = "ngram"
backend = "llamacpp"
model = "embedded:smollm2"
drafter = "ngram"
n_max = 3
"""


def _run(tmp: Path) -> tuple[list[Any], str]:
    from lab.profile.load import parse_profile
    from lab.registry import load_registry
    from lab.render.report import ReportWriter
    from lab.runner import Runner
    from lab.store import RunStore

    registry = load_registry()
    profile = parse_profile(PROFILE, str(tmp / "p.toml"), registry)
    store = RunStore(profile, tmp / "runs")
    rows = Runner(profile, registry, store, [ReportWriter()]).run()
    return rows, (store.path / "report.md").read_text(encoding="utf-8")


# alone: the guard reads the whole machine, and other tests beside it decide how
# much of it the burners and the engine get (and how long the run outlives them)
@pytest.mark.alone
@pytest.mark.engine
def test_a_run_beside_a_cpu_burner_is_marked_and_its_report_says_so(tmp_path: Path) -> None:
    import psutil

    pytest.importorskip("llama_cpp")
    with foreign_burners(2, 240) as burners:
        rows, md = _run(tmp_path)
        gone = [pid for pid in burners
                if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE]
    assert not gone, f"burners {gone} ended before the run did: the run read no burner"
    assert [r["status"] for r in rows] == ["ok", "ok"]
    assert all(r["contended"] and r["contention"] >= 0.5 for r in rows), [(r["arm"], r["contention"], r["contention_note"], r["threads_hint"]) for r in rows]
    spec = next(r for r in rows if r["arm"] == "ngram")
    # paired with its baseline's cell, seconds apart: the load moved both, so the
    # pair's own verdict stands, marked busy beside it, not a blanket "uncertain"
    assert spec["verdict"] == judge(spec).line and "machine was busy" not in spec["verdict"], spec["verdict"]
    if judge(spec).kind == breakeven.UNCERTAIN:  # only where acceptance and timing contradict each other
        assert "timing is off" in spec["verdict"], spec["verdict"]
    assert "⚠ busy machine" in md and "cells ran on a busy machine" in md


@pytest.mark.alone
@pytest.mark.engine
def test_a_run_does_not_count_its_own_engine(tmp_path: Path) -> None:
    """The lab's engine keeps every core busy; none of that is contention.
    What the rows show is at most what other processes did before the run
    (measured just before, by the same watcher), and the mark follows the
    threshold. On a machine with an idle background that makes the run quiet."""
    pytest.importorskip("llama_cpp")
    cores = os.cpu_count() or 1
    with ContentionWatcher("idle", engine_cores=cores) as w:
        m = w.mark()
        time.sleep(2.0)
        before = w.reading(m).others_cores
    rows, md = _run(tmp_path)
    for r in rows:
        assert r["contention"] <= before + 0.35, (r["arm"], r["contention"], before)
        assert r["contended"] == (r["contention"] > contention.BUSY_CORES or r["arm"] == "ngram" and rows[0]["contended"])
    if before < 0.15:  # an idle background: the run is quiet and the report says so
        assert not any(r["contended"] for r in rows) and "Quiet: other processes used at most" in md


@pytest.mark.engine
def test_two_runs_started_at_once_mark_each_other(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    profile = tmp_path / "p.toml"
    # Each run asks for every core: with threads = 0 a run that starts while
    # the other loads may take fewer, and two one-thread engines on two cores
    # leave each other alone (the guard rightly reads them quiet).
    cores = available_cores()
    profile.write_text(PROFILE.replace("rounds = 1", f"rounds = 2\nthreads = {cores}"), encoding="utf-8")
    procs = [
        subprocess.Popen([sys.executable, "-m", "lab.cli", "run", str(profile), "--out", str(tmp_path / f"runs{i}")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for i in (1, 2)
    ]
    try:
        for p in procs:
            assert p.wait(timeout=1200) == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for i in (1, 2):
        (run_dir,) = (tmp_path / f"runs{i}").iterdir()
        rows = json.loads((run_dir / "results.json").read_text())["results"]
        assert any(r["contended"] for r in rows), [r["contention"] for r in rows]
        assert "cells ran on a busy machine" in (run_dir / "report.md").read_text(encoding="utf-8")


def test_a_run_cancelled_before_any_cell_ended_does_not_read_as_an_old_run() -> None:
    from lab.render.conditions import machine_lines

    cancelled = [{"arm": "a", "prompt": "p", "round": 1, "status": "cancelled", "contention": None},
                 {"arm": "b", "prompt": "p", "round": 1, "status": "skipped", "contention": None}]
    said = " ".join(machine_lines(cancelled, {}))
    assert "nothing to watch" in said and "noise guard" not in said
    # a row that ran but carries no reading is a run saved before the guard existed
    old = [{"arm": "a", "prompt": "p", "round": 1, "status": "ok", "contention": None}]
    assert "saved before the noise guard" in " ".join(machine_lines(old, {}))
