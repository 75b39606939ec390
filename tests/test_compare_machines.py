"""Comparing runs tells the machine apart from how it ran: two runs of one
machine under other load or threads compare without a machine warning and
say their conditions in words; a changed CPU model warns, in words, never
as a raw dict."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from lab.analysis.compare import condition_differences, identity_differences, warnings
from lab.profile.load import parse_profile
from lab.render.report import load_for_report
from lab.runner import Runner
from lab.store import RunStore
from tests.fakes import fake_registry, profile_toml

ARMS = """
[[arms]]
name = "base"
backend = "fake"
options = { virtual_clock = true }
"""


def _saved_run(tmp_path: Path, name: str) -> dict[str, Any]:
    """A run the runner saved on this machine (a scripted backend)."""
    registry = fake_registry()
    profile = parse_profile(profile_toml(ARMS, name=name), f"{name}.toml", registry)
    store = RunStore(profile, tmp_path / name)
    Runner(profile, registry, store).run()
    return load_for_report(store.path)


def test_a_run_records_what_tells_its_machine_apart(tmp_path: Path) -> None:
    machine = _saved_run(tmp_path, "a")["machine"]
    assert machine["cpu"] and machine["cpu_count"] and machine["platform"]
    assert isinstance(machine["memory_bytes"], int) and machine["memory_bytes"] > 0


def test_two_runs_of_one_machine_under_other_conditions_do_not_warn_of_machines(tmp_path: Path) -> None:
    a = _saved_run(tmp_path, "a")
    b = _saved_run(tmp_path, "b")
    # as the issue saw it: one run squeezed to 1 core beside other work, the other with both
    a["machine"]["threads"] = {"asked": 0, "cores": 2, "others_cores": 2.01, "used": 1}
    b["machine"]["threads"] = {"asked": 0, "cores": 2, "others_cores": 0.05, "used": 2}
    said = warnings(a, b)
    assert not any("different machines" in w for w in said), said
    conditions = next(w for w in said if w.startswith("the runs ran under other conditions"))
    assert "1 of 2 cores in A and 2 of 2 in B" in conditions
    assert "2.01 cores busy as A started and 0.05 as B did" in conditions
    assert "{" not in conditions and "'used'" not in conditions


def test_a_changed_cpu_model_warns_in_words(tmp_path: Path) -> None:
    a = _saved_run(tmp_path, "a")
    b = copy.deepcopy(a)
    b["machine"]["cpu"] = "Some Other CPU 9000"
    b["machine"]["memory_bytes"] = 2**34
    said = warnings(a, b)
    machines = next(w for w in said if w.startswith("the runs come from different machines"))
    assert f"CPU {a['machine']['cpu']} in A, Some Other CPU 9000 in B" in machines
    assert "memory" in machines and "16.0 GiB in B" in machines
    assert "{" not in machines
    assert identity_differences(a, a) == [] and condition_differences(a, a) == []


def test_a_gpu_in_one_run_only_is_a_machine_difference(tmp_path: Path) -> None:
    a = _saved_run(tmp_path, "a")
    b = copy.deepcopy(a)
    b["results"] = [{**r, "gpu_name": "NVIDIA H200"} for r in b["results"]]
    assert identity_differences(a, b) == ["GPU none in A, NVIDIA H200 in B"]
