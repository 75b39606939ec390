"""Shared test settings and fixtures.

In CI (CI=true) a skipped test is a failure: CI installs every engine the
tests need, so a skip there means a missing install step, not a missing
machine. Skips whose reason starts with "hardware:" (a GPU, Apple Silicon)
are the exception.

The suite runs in parallel workers (pytest-xdist, ``-n auto`` in
pyproject.toml). A test marked ``alone`` measures time: while it runs no
other test runs in any worker, so what it measures is its own. Tests marked
``xdist_group(NAME)`` run as many at a time as the group has slots,
whichever worker has them (vLLM: two, each server with 1 GiB of KV cache;
at vLLM's own default a server takes a third of this machine's memory).

Engines' OpenMP threads (llama.cpp's CPU kernels, torch under vLLM) wait for
each other at every barrier. By default they spin while they wait, and with
more workers than cores a spinning thread holds the core the thread it waits
for needs: on this 2-core machine the engine tests took twice the CPU and
twice the time. The suite sets ``OMP_WAIT_POLICY=PASSIVE`` (unless already
set), so that a waiting thread sleeps; every engine and every engine's own
tool the tests compare against runs under the same setting."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

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


# The room an ``alone`` test held whole, kept for the ``alone`` test after it
# (they run last, one after the other, as one unit: the room drains once).
_whole: tuple[IO[bytes], IO[bytes]] | None = None


@contextmanager
def _turn(room: Path, alone: bool, keep_whole: bool) -> Iterator[None]:
    """Every test holds the room shared, an ``alone`` test holds it whole.
    The gate is taken on the way in, and an ``alone`` test keeps it while it
    waits and runs: no test gets in ahead of one that waits to be alone.
    With ``keep_whole`` an ``alone`` test hands both on to the next one."""
    global _whole
    assert fcntl is not None
    if alone and _whole is not None:
        gate, hall = _whole
        _whole = None
    else:
        gate, hall = open(room / "gate", "a+b"), open(room / "room", "a+b")
        fcntl.flock(gate.fileno(), fcntl.LOCK_EX)
        try:
            fcntl.flock(hall.fileno(), fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(gate.fileno(), fcntl.LOCK_UN)
    try:
        yield
    finally:
        if alone and keep_whole:
            _whole = (gate, hall)
        else:
            hall.close()  # closing drops the lock
            gate.close()


# How many tests of a group may run at once (1 unless named): the suite's
# vLLM servers take 2.5 GiB each (1 GiB of KV cache, VLLM_CPU_KVCACHE_SPACE).
_GROUP_SLOTS = {"vllm": 2}


def _take_slot(room: Path, name: str) -> IO[bytes]:
    """A slot of the group, held while the returned file stays open."""
    assert fcntl is not None
    slots = [room / f"group-{name}-{i}" for i in range(_GROUP_SLOTS.get(name, 1))]
    while True:
        for path in slots:
            f = open(path, "a+b")
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | (fcntl.LOCK_NB if len(slots) > 1 else 0))
                return f
            except BlockingIOError:
                f.close()
        time.sleep(0.2)


@contextmanager
def _one_of(room: Path, groups: list[str]) -> Iterator[None]:
    """As many tests of each named group at a time as it has slots (taken
    before the room: a test waiting for its group keeps no ``alone`` test out)."""
    files = []
    try:
        for name in sorted(set(groups)):
            files.append(_take_slot(room, name))
        yield
    finally:
        for f in files:
            f.close()  # closing drops the lock


# -- order --------------------------------------------------------------------------
# Each file runs whole on one worker (--dist loadfile: a module's engine
# fixture starts once), the longest files first, so that no long file starts
# last and keeps one worker busy after the others are done. The ``alone``
# tests come last, as one unit of their own: the room drains once, when only
# the shortest files are left. tests/durations.json holds each file's seconds
# in the last recorded run; `LAB_TEST_DURATIONS=tests/durations.json pytest`
# records them again (a file it does not know counts as UNTIMED_S).
DURATIONS = Path(__file__).with_name("durations.json")
UNTIMED_S = 10.0
_ALONE_UNIT = "(alone)"


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _is_alone(item: pytest.Item) -> bool:
    return item.get_closest_marker("alone") is not None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    try:
        seconds = json.loads(DURATIONS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        seconds = {}
    # stable: a file's tests stay together and in their order
    items.sort(key=lambda item: (_is_alone(item), -float(seconds.get(_file_of(item.nodeid), UNTIMED_S))))
    room = getattr(config, "workerinput", {}).get(_ROOM)
    if room:  # for the scheduler, which sees node ids only
        mine = Path(room) / f"alone.{os.getpid()}"
        mine.write_text("\n".join(item.nodeid for item in items if _is_alone(item)), encoding="utf-8")
        os.replace(mine, Path(room) / "alone")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FilesThenAlone(LoadFileScheduling):  # type: ignore[misc]
        """Files as units, in the workers' order; the ``alone`` tests one unit."""

        _alone: frozenset[str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._alone is None:
                room = getattr(config, "_lab_room", None)
                try:
                    listed = (Path(room) / "alone").read_text(encoding="utf-8").splitlines() if room else []
                except OSError:
                    listed = []
                self._alone = frozenset(listed)
            return _ALONE_UNIT if nodeid in self._alone else str(super()._split_scope(nodeid))

    return FilesThenAlone(config, log)


# -- durations ----------------------------------------------------------------------
_spent: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if os.environ.get("LAB_TEST_DURATIONS"):
        path = _file_of(report.nodeid)
        _spent[path] = _spent.get(path, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = os.environ.get("LAB_TEST_DURATIONS")
    if not out or hasattr(session.config, "workerinput") or not _spent:
        return  # a worker's reports reach the controller too: it writes
    try:
        known = json.loads(Path(out).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        known = {}
    known.update({path: round(s, 1) for path, s in _spent.items()})
    Path(out).write_text(json.dumps(dict(sorted(known.items())), indent=0) + "\n", encoding="utf-8")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    room = getattr(item.config, "workerinput", {}).get(_ROOM)
    if not room or fcntl is None:
        yield
        return
    groups = [str(m.args[0]) if m.args else str(m.kwargs.get("name", "")) for m in item.iter_markers("xdist_group")]
    # setup, call and teardown: a module's engine starts inside the turn too
    alone = item.get_closest_marker("alone") is not None
    keep_whole = alone and nextitem is not None and nextitem.get_closest_marker("alone") is not None
    with _one_of(Path(room), groups), _turn(Path(room), alone, keep_whole):
        yield
