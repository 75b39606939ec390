"""Shared test settings and fixtures.

In CI (CI=true) a skipped test is a failure: CI installs every engine the
tests need, so a skip there means a missing install step, not a missing
machine. Skips whose reason starts with "hardware:" (a GPU, Apple Silicon)
are the exception.

The suite runs in parallel workers (pytest-xdist, ``-n auto`` in
pyproject.toml). A test marked ``alone`` measures time: while it runs no
other test runs in any worker, so what it measures is its own. Tests marked
``xdist_group(NAME)`` run one at a time, whichever worker has them (vLLM's
engine takes a third of this machine's memory: two at once would not fit).

Engines' OpenMP threads (llama.cpp's CPU kernels, torch under vLLM) wait for
each other at every barrier. By default they spin while they wait, and with
more workers than cores a spinning thread holds the core the thread it waits
for needs: on this 2-core machine the engine tests took twice the CPU and
twice the time. The suite sets ``OMP_WAIT_POLICY=PASSIVE`` (unless already
set), so that a waiting thread sleeps; every engine and every engine's own
tool the tests compare against runs under the same setting."""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: tests marked alone then share the machine
    fcntl = None  # type: ignore[assignment]


@pytest.fixture
def anyio_backend() -> str:
    """The event loop every async (Pilot) test runs on."""
    return "asyncio"


@pytest.fixture(scope="module")
def registry() -> Any:
    """The installed plugins' registry; a module that needs another (fakes,
    extra plugins) defines its own ``registry``."""
    from lab.registry import load_registry

    return load_registry()


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _fail_skip_in_ci(report: pytest.TestReport | pytest.CollectReport, where: str) -> None:
    if not _in_ci() or not report.skipped:
        return
    reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if "hardware:" in reason:
        return
    report.outcome = "failed"
    report.longrepr = f"{where} skipped in CI, where nothing may be skipped: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    outcome = yield
    _fail_skip_in_ci(outcome.get_result(), item.nodeid)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    # A module-level importorskip skips while the module is collected, before
    # any test report exists: that is the skip a missing engine would cause.
    outcome = yield
    _fail_skip_in_ci(outcome.get_result(), collector.nodeid)


# -- workers ----------------------------------------------------------------------

_ROOM = "lab_alone_room"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    # The tests mostly wait (on subprocesses, servers, sleeps), so more workers
    # than cores keep the cores busy; LAB_TEST_WORKERS or -n N overrides.
    given = os.environ.get("LAB_TEST_WORKERS")
    if given:
        return int(given)
    return 2 * len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2 * (os.cpu_count() or 1)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    config = node.config
    if not hasattr(config, "_lab_room"):
        config._lab_room = tempfile.mkdtemp(prefix="lab-tests-")
    node.workerinput[_ROOM] = config._lab_room


def pytest_unconfigure(config: pytest.Config) -> None:
    room = getattr(config, "_lab_room", None)
    if room:
        shutil.rmtree(room, ignore_errors=True)


@contextmanager
def _turn(room: Path, alone: bool) -> Iterator[None]:
    """Every test holds the room shared, an ``alone`` test holds it whole.
    The gate is taken on the way in, and an ``alone`` test keeps it while it
    waits and runs: no test gets in ahead of one that waits to be alone."""
    assert fcntl is not None
    with open(room / "gate", "a+b") as gate, open(room / "room", "a+b") as hall:
        fcntl.flock(gate.fileno(), fcntl.LOCK_EX)
        try:
            fcntl.flock(hall.fileno(), fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(gate.fileno(), fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(hall.fileno(), fcntl.LOCK_UN)
            if alone:
                fcntl.flock(gate.fileno(), fcntl.LOCK_UN)


@contextmanager
def _one_of(room: Path, groups: list[str]) -> Iterator[None]:
    """One test of each named group at a time (taken before the room: a test
    waiting for its group keeps no ``alone`` test out)."""
    assert fcntl is not None
    files = [open(room / f"group-{name}", "a+b") for name in sorted(set(groups))]
    try:
        for f in files:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        yield
    finally:
        for f in files:
            f.close()  # closing drops the lock


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    room = getattr(item.config, "workerinput", {}).get(_ROOM)
    if not room or fcntl is None:
        yield
        return
    groups = [str(m.args[0]) if m.args else str(m.kwargs.get("name", "")) for m in item.iter_markers("xdist_group")]
    # setup, call and teardown: a module's engine starts inside the turn too
    with _one_of(Path(room), groups), _turn(Path(room), item.get_closest_marker("alone") is not None):
        yield
