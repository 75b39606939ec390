"""A run's probe is measured in a process of its own (on a GPU the arms of
a process that probed decoded ~4 % slower): the run's process never
measures, the probe says where it came from, a cancel stops the child and
leaves no process behind, and ``LAB_PROBE_PROCESS=shared`` keeps the old
way for the A/B."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from lab.base import probe as probes
from lab.probing import driver, isolated
from lab.profile.load import parse_profile
from lab.registry import load_registry
from lab.runner import Runner
from lab.store import RunStore
from tests.fakes import fake_plugin

pytestmark = pytest.mark.engine

SPEC = driver.ProbeSpec("llamacpp", "embedded:smollm2", 1, {}, (1, 2, 3))
PROFILE = """
[run]
max_tokens = 8
rounds = 1
warmup = 0
threads = 1

[[prompts]]
name = "p"
text = "def add(a, b):"

[[arms]]
name = "baseline"
backend = "llamacpp"
model = "embedded:smollm2"

[[arms]]
name = "ngram"
backend = "llamacpp"
model = "embedded:smollm2"
drafter = "ngram"
n_max = 2
"""


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("LAB_CACHE_DIR", str(root))
    monkeypatch.delenv("LAB_PROBE_PROCESS", raising=False)
    return root


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_installed_backends_probe_apart_and_in_process_ones_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LAB_PROBE_PROCESS", raising=False)
    registry = load_registry(extra_plugins=[fake_plugin])
    assert isolated.wants_own_process(SPEC, registry)
    # a backend handed to the registry in this process does not exist in a child
    assert not isolated.wants_own_process(driver.ProbeSpec("fake", "", 1, {}, (1, 2)), registry)
    monkeypatch.setenv("LAB_PROBE_PROCESS", "shared")
    assert not isolated.wants_own_process(SPEC, registry)


def test_a_runs_probe_is_measured_outside_the_runs_process(
        tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def here(*args: object, **kwargs: object) -> None:
        raise AssertionError("the run's own process measured the probe")

    monkeypatch.setattr(driver, "measure", here)
    registry = load_registry()
    profile = parse_profile(PROFILE, str(tmp_path / "p.toml"), registry)
    store = RunStore(profile, tmp_path / "runs")
    rows = Runner(profile, registry, store).run()
    assert all(r.ok for r in rows), [r.detail for r in rows]
    (p,) = probes.find_all(store.path)
    assert p.origin["source"] == "measured" and p.origin["process"] == "own"
    assert {1, 2, 3} <= set(p.widths)
    # the child's words are in the run's log, under its pid
    log = (Path(store.path) / "lab.log").read_text()
    pid = int(re.search(r"in its own process \(pid (\d+)\)", log).group(1))  # type: ignore[union-attr]
    assert pid != os.getpid() and _gone(pid)


def test_a_cancel_stops_the_probes_process(cache: Path) -> None:
    said: list[str] = []
    start = time.monotonic()
    got = isolated.obtain_isolated(SPEC, load_registry(), repeats=50, cancelled=lambda: time.monotonic() - start > 1.0,
                                   log=said.append)
    assert got is None
    assert time.monotonic() - start < 1.0 + isolated.STOP_GRACE_S + 2
    (text,) = said
    pid = int(re.search(r"pid (\d+)", text).group(1))  # type: ignore[union-attr]
    assert _gone(pid)
    assert driver.cached(SPEC) is None  # nothing half-measured was kept


def test_a_child_that_fails_is_an_error_naming_its_last_words(cache: Path) -> None:
    spec = driver.ProbeSpec("llamacpp", "/no/such/model.gguf", 1, {}, (1, 2))
    with pytest.raises(RuntimeError, match="the probe's process ended with status 1: .*model"):
        isolated.obtain_isolated(spec, load_registry())
