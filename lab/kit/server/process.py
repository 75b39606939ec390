"""One server process (llama-server, vLLM): started directly (no shell, so
the pid held is the server's), waited on until it serves, its log read
live, stopped by its own pid on every path; on Linux the kernel kills it
if the starting thread dies, and an atexit hook stops what still runs."""

from __future__ import annotations

import atexit
import collections
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from typing import IO, Any, Callable, Sequence

GRACE_S = 5.0

_live: weakref.WeakSet[ServerProcess] = weakref.WeakSet()


def free_port() -> int:
    """A port that was free a moment ago on 127.0.0.1. The server binds it
    right after; a lost race shows up as a failed start with the log."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _child_setup(address_space: int | None) -> Callable[[], None]:
    def setup() -> None:  # pragma: no cover - runs in the child
        # PR_SET_PDEATHSIG: SIGKILL when the starting thread exits, even for a lab killed with -9
        try:
            import ctypes

            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, signal.SIGKILL, 0, 0, 0)
        except Exception:  # noqa: BLE001 - best effort; atexit and close() still apply
            pass
        if address_space is not None:
            # allocations past the cap fail at once instead of waking the OOM killer later
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    return setup


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
        self.tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
        self.proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._log: IO[str] | None = None
        self._lock = threading.Lock()
        self.started_at = 0.0
        self.address_space_limit = address_space_limit
        # a server with worker processes: a watchdog kills its whole process
        # group should the lab die without stopping it (kill -9)
        self.watch_group = watch_group
        self._watchdog: subprocess.Popen[bytes] | None = None

    # -- life cycle -----------------------------------------------------------
    def start(self) -> None:
        os.makedirs(os.path.dirname(self.log_path) or ".", exist_ok=True)
        self._log = open(self.log_path, "a", encoding="utf-8", errors="replace")
        self._log.write("$ " + " ".join(self.argv) + "\n")
        self._log.flush()
        preexec = _child_setup(self.address_space_limit) if sys.platform.startswith("linux") else None
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=self.env,
            preexec_fn=preexec,  # noqa: PLW1509 - only prctl, async-signal safe enough
            # own process group: the lab, not a terminal Ctrl-C, stops the server, in order
            start_new_session=True,
        )
        self.started_at = time.monotonic()
        _live.add(self)
        if self.watch_group and sys.platform.startswith("linux"):
            self._watchdog = subprocess.Popen(
                [sys.executable, "-c", _GROUP_WATCHDOG, str(os.getpid()), str(self.proc.pid)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        self._reader = threading.Thread(target=self._read, name=f"server-{self.proc.pid}", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def returncode(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for raw in iter(self.proc.stdout.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            with self._lock:
                self.tail.append(line)
                if self._log is not None and not self._log.closed:
                    self._log.write(line + "\n")
                    self._log.flush()
            if self.on_line is not None:
                try:
                    self.on_line(line)
                except Exception:  # noqa: BLE001 - a parser bug must not stop the log
                    pass

    def excerpt(self, n: int = 40, match: Callable[[str], bool] | None = None) -> str:
        """The last n log lines, or the last n that match."""
        with self._lock:
            lines = list(self.tail)
        if match is not None:
            picked = [ln for ln in lines if match(ln)]
            lines = picked or lines
        return "\n".join(lines[-n:])

    def wait_log_quiet(self, timeout: float = 1.0) -> None:
        """Wait until the reader has caught up: no new line for 50 ms."""
        deadline = time.monotonic() + timeout
        last = -1
        while time.monotonic() < deadline:
            with self._lock:
                n = len(self.tail) + (hash(self.tail[-1]) if self.tail else 0)
            if n == last:
                return
            last = n
            time.sleep(0.05)

    def stop(self, grace: float = GRACE_S) -> int | None:
        """SIGINT to the server's own pid, SIGKILL after ``grace`` seconds.
        Safe to call more than once and from any path."""
        proc = self.proc
        if proc is None:
            return None
        # note a server's worker processes (vLLM) while it still holds them
        workers = _children(proc.pid) if proc.poll() is None else []
        try:
            if proc.poll() is None:
                try:
                    os.kill(proc.pid, signal.SIGINT)
                except ProcessLookupError:
                    pass
                try:
                    proc.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    try:
                        os.kill(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    proc.wait(timeout=10)
            _kill_all(workers, grace)
        finally:
            if self._watchdog is not None and self._watchdog.poll() is None:
                self._watchdog.kill()
                self._watchdog.wait(timeout=5)
            if self._reader is not None:
                self._reader.join(timeout=2)
            with self._lock:
                if self._log is not None and not self._log.closed:
                    self._log.write(f"# lab: server pid {proc.pid} stopped, exit code {proc.returncode}\n")
                    self._log.close()
            _live.discard(self)
        return proc.returncode


def _children(pid: int) -> list[Any]:
    try:
        import psutil

        return list(psutil.Process(pid).children(recursive=True))
    except Exception:  # noqa: BLE001 - no psutil, or the process just went
        return []


def _kill_all(workers: list[Any], grace: float) -> None:
    """Workers still running once their server exited: SIGTERM, then SIGKILL."""
    if not workers:
        return
    import psutil

    alive = [w for w in workers if w.is_running()]
    for w in alive:
        try:
            w.terminate()
        except psutil.NoSuchProcess:
            pass
    _, left = psutil.wait_procs(alive, timeout=grace)
    for w in left:
        try:
            w.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(left, timeout=5)


def stop_all() -> None:
    """Stop every server this process started and still holds."""
    for server in list(_live):
        try:
            server.stop(grace=2.0)
        except Exception:  # noqa: BLE001 - exiting anyway
            pass


atexit.register(stop_all)
