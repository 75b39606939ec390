"""Threads that fit a busy machine: beside a CPU burner (a process outside
the lab's tree, as a neighbour is), ``[run] threads = 0`` runs with the cores
the burner leaves and says so in results.json, lab run's progress and the
report; a profile that names more threads than fit gets busy cells whose
mark says which count to try. Real llama.cpp in process on a tiny synthetic
model."""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from lab.base.machine import available_cores
from lab.base.verdict import busy_warning
from lab.telemetry.contention import Contention, fitting_threads

# Long enough a cell to be judged (lab.telemetry.contention.MIN_JUDGED_S):
# the tiny model writes 400 tokens in about 0.1 s, 1500 in 0.4 s or, its
# threads queueing behind the burner, up to 30 s.
PROFILE = """
[run]
max_tokens = 1500
ignore_eos = true
rounds = 1
warmup = 0
n_ctx = 1600
threads = {threads}
probe = false
chat_template = false
[[prompts]]
name = "p"
text = "lighthouse ships sea"
[[arms]]
name = "base"
backend = "llamacpp"
model = "synthetic:tiny"
"""


def test_fitting_threads() -> None:
    assert fitting_threads(2, 0.0) == 2
    assert fitting_threads(2, 0.25) == 2
    assert fitting_threads(2, 0.95) == 1
    assert fitting_threads(2, 2.0) == 1
    assert fitting_threads(16, 3.1) == 13
    busy = Contention(others_cores=1.0, spare_cores=0.0, seconds=2.0, cores=2)
    assert busy.contended and busy.threads_hint() == 1
    fits = Contention(others_cores=1.0, spare_cores=1.0, seconds=2.0, cores=2)
    assert fits.threads_hint() is None
    # a neighbour squeezed to half a core by two engine threads: not busy, still oversubscribed
    squeezed = Contention(others_cores=0.45, spare_cores=0.0, seconds=2.0, cores=2)
    assert not squeezed.contended and squeezed.threads_hint() == 1
    # a full machine: the neighbour's share reads small, the engine's threads queue
    queued = Contention(others_cores=0.22, spare_cores=0.0, seconds=2.0, waiting_cores=1.07, cores=2)
    assert queued.threads_hint() == 1
    alone = Contention(others_cores=0.02, spare_cores=0.0, seconds=2.0, waiting_cores=0.6, cores=2)
    assert alone.threads_hint() is None
    assert busy_warning({"contended": True, "threads_hint": 1}).endswith("(try threads = 1)")
    assert busy_warning({"contended": False, "threads_hint": 1}) == "⚠ more threads than free cores (try threads = 1)"
    assert busy_warning({"contended": False, "threads_hint": None}) == ""
    assert "try" not in busy_warning({"contended": True, "threads_hint": None})


@pytest.fixture
def burner() -> Iterator[list[int]]:
    """Busy loops on all cores but one, outside the lab's process tree (the
    noise guard does not count the lab's own children as neighbours)."""
    from tests.test_contention import foreign_burners

    n = available_cores() - 1
    if n < 1:
        pytest.skip("needs at least 2 cores to leave one free beside a burner")
    with foreign_burners(n, 120) as pids:
        time.sleep(0.5)
        yield pids


def _run(tmp_path: Path, threads: int) -> tuple[list[dict[str, Any]], dict[str, Any], str, str]:
    from lab.cli.progress import Progress
    from lab.profile.load import parse_profile
    from lab.registry import load_registry
    from lab.render.report import write_report
    from lab.runner import Runner
    from lab.store import RunStore

    registry = load_registry()
    profile = parse_profile(PROFILE.format(threads=threads), str(tmp_path / "p.toml"), registry)
    store = RunStore(profile, tmp_path / "runs")
    out = io.StringIO()
    rows = [r.to_json() for r in Runner(profile, registry, store, [Progress(out)]).run()]
    import json

    meta = json.loads((store.path / "results.json").read_text(encoding="utf-8"))
    return rows, meta.get("machine") or {}, out.getvalue(), write_report(store.path).read_text(encoding="utf-8")


@pytest.mark.engine
def test_threads_zero_fits_beside_a_burner(tmp_path: Path, burner: list[int]) -> None:
    pytest.importorskip("llama_cpp", reason="needs llama-cpp-python (scripts/setup.sh llamacpp)")
    rows, machine, progress, report = _run(tmp_path, threads=0)
    assert rows[0]["status"] == "ok", rows[0]["detail"]
    t = machine["threads"]
    cores = available_cores()
    assert t["cores"] == cores and t["others_cores"] >= len(burner) - 0.5
    assert t["used"] == cores - len(burner)
    assert f"threads = 0: {t['used']} of {cores} cores" in progress
    assert f"threads = 0 ran with {t['used']} of {cores} cores" in report


@pytest.mark.engine
def test_too_many_threads_beside_a_burner_say_what_to_try(tmp_path: Path, burner: list[int]) -> None:
    pytest.importorskip("llama_cpp", reason="needs llama-cpp-python (scripts/setup.sh llamacpp)")
    cores = available_cores()
    rows, machine, _, report = _run(tmp_path, threads=cores)
    assert "threads" not in machine
    row = rows[0]
    assert row["status"] == "ok", row["detail"]
    assert row["threads_hint"] == cores - len(burner), row["contention_note"]
    assert f"try threads = {cores - len(burner)}" in report
