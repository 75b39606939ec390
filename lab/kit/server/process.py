"""One server process (llama-server, vLLM) as a :class:`lab.kit.children.Child`:
started directly (no shell, so the pid held is the server's), its log read
live line by line, stopped with SIGINT (its own orderly shutdown) and then
as every child of the lab is, with everything it started; on Linux the
kernel kills it if the starting thread dies, and an atexit hook stops what
still runs."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from typing import Callable, Sequence

from lab.kit.children import Child

GRACE_S = 5.0


def free_port() -> int:
    """A port that was free a moment ago on 127.0.0.1. The server binds it
    right after; a lost race shows up as a failed start with the log."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Kills a server's process group once the lab is gone: the parent-death
# signal reaches the server but not the workers it forks.
_GROUP_WATCHDOG = """
import os, signal, sys, time
lab, group = int(sys.argv[1]), int(sys.argv[2])
while True:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        break
    if os.getppid() != lab:
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass
        break
    time.sleep(0.5)
"""


class ServerProcess:
    """A running server. ``on_line`` is called from the reader thread
    for every log line (already written to ``log_path``)."""

    def __init__(
        self,
        argv: Sequence[str],
        log_path: str,
        env: dict[str, str] | None = None,
        on_line: Callable[[str], None] | None = None,
        tail_lines: int = 400,
        address_space_limit: int | None = None,
        watch_group: bool = False,
    ) -> None:
        self.argv = list(argv)
        self.log_path = log_path
        self.env = {**os.environ, **(env or {})}
        self.on_line = on_line
        self.tail_lines = tail_lines
        self.address_space_limit = address_space_limit
        self.child: Child | None = None
        self.started_at = 0.0
        # a server with worker processes: a watchdog kills its whole process
        # group should the lab die without stopping it (kill -9)
        self.watch_group = watch_group
        self._watchdog: Child | None = None

    # -- life cycle -----------------------------------------------------------
    def start(self) -> None:
        self.child = Child(self.argv, name=os.path.basename(self.argv[0]), log_path=self.log_path, env=self.env,
                           on_line=self.on_line or (lambda line: None), tail_lines=self.tail_lines,
                           stop_signal=signal.SIGINT, address_space_limit=self.address_space_limit)
        self.started_at = self.child.started_at
        if self.watch_group and sys.platform.startswith("linux"):
            self._watchdog = Child([sys.executable, "-c", _GROUP_WATCHDOG, str(os.getpid()), str(self.child.pid)],
                                   name="the server's group watchdog", die_with_parent=False)

    @property
    def pid(self) -> int | None:
        return self.child.pid if self.child is not None else None

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self.child.proc if self.child is not None else None

    def alive(self) -> bool:
        return self.child is not None and self.child.alive()

    def returncode(self) -> int | None:
        return self.child.poll() if self.child is not None else None

    def excerpt(self, n: int = 40, match: Callable[[str], bool] | None = None) -> str:
        """The last n log lines, or the last n that match."""
        return "\n".join(self.child.lines(n, match)) if self.child is not None else ""

    def wait_log_quiet(self, timeout: float = 1.0) -> None:
        """Wait until the reader has caught up: no new line for 50 ms."""
        if self.child is None:
            return
        deadline = time.monotonic() + timeout
        last: tuple[int, str] | None = None
        while time.monotonic() < deadline:
            lines = self.child.lines(1)
            now = (len(self.child.tail), lines[-1] if lines else "")
            if now == last:
                return
            last = now
            time.sleep(0.05)

    def stop(self, grace: float = GRACE_S) -> int | None:
        """SIGINT to the server, SIGKILL after ``grace`` seconds, its workers
        and what they started ended too. Safe to call more than once."""
        if self.child is None:
            return None
        try:
            return self.child.stop(grace)
        finally:
            if self._watchdog is not None:
                self._watchdog.stop(0.5)
