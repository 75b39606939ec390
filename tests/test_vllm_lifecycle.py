"""A server with worker processes (vLLM forks and spawns them) leaves none
behind: stopped, its workers go too; the lab killed with -9, the group
watchdog takes the whole process group down. A shell that backgrounds two
sleeps stands in for the server's process tree (no engine needed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="hardware: Linux process groups")

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = str(ROOT / "plugins")
TREE = ["sh", "-c", "sleep 300 & sleep 300 & wait"]


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_gone(pids: list[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


def _tree(pid: int, n: int) -> list[int]:
    import psutil

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        kids = [c.pid for c in psutil.Process(pid).children(recursive=True)]
        if len(kids) >= n:
            return kids
        time.sleep(0.05)
    raise AssertionError("the stand-in server did not start its workers")


def test_stop_takes_the_workers_with_the_server(tmp_path: Path) -> None:
    from lab.kit.server.process import ServerProcess

    server = ServerProcess(TREE, str(tmp_path / "s.log"), watch_group=True)
    server.start()
    assert server.pid is not None
    workers = _tree(server.pid, 2)
    try:
        server.stop(grace=1.0)
        assert _wait_gone([server.pid, *workers], 10.0)
    finally:
        for pid in workers:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_killed_lab_leaves_no_worker(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import time
        from lab.kit.server.process import ServerProcess
        s = ServerProcess({TREE!r}, {str(tmp_path / "s.log")!r}, watch_group=True)
        s.start()
        print(s.pid, flush=True)
        time.sleep(120)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), PLUGINS, os.environ.get("PYTHONPATH", "")])}
    lab = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    pids: list[int] = []
    try:
        assert lab.stdout is not None
        server = int(lab.stdout.readline().strip())
        pids = [server, *_tree(server, 2)]
        lab.kill()
        lab.wait()
        assert _wait_gone(pids, 15.0), "a worker outlived the lab that started its server"
    finally:
        if lab.poll() is None:
            lab.kill()
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
