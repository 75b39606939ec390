"""Every process the lab starts, started and stopped one way.

A :class:`Child` runs in a session of its own (a terminal's Ctrl-C reaches
the lab, which stops its children in order), writes its output to a log file
(or through a pipe to a reader that logs each line), and is stopped with
everything it started: SIGTERM (or the signal it answers, SIGINT for a
server) to its process group, SIGKILL to what is left after a grace period,
then the descendants that left the group (a grandchild that started its own
session) the same way, and the child reaped. The last lines of its output
stay readable after it ended, and :meth:`Child.death` says how it ended.

On Linux the lab makes itself a subreaper (:func:`adopt_orphans`): a
process a plugin started and then abandoned is re-parented to the lab, not
to init, so :func:`end_descendants` still finds it at the lab's exit.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import IO, Any, Callable, Sequence

# how long a child has after SIGTERM (or SIGINT) before SIGKILL
GRACE_S = 5.0
POLL_S = 0.05
TAIL_LINES = 12

_live: weakref.WeakSet[Child] = weakref.WeakSet()
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except Exception:  # noqa: BLE001 - best effort: without it the atexit sweep still runs
        return False


def adopt_orphans() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux), so
    that what a plugin's process leaves behind stays findable."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def _child_setup(address_space: int | None, die_with_parent: bool) -> Callable[[], None] | None:
    if not sys.platform.startswith("linux") or (address_space is None and not die_with_parent):
        return None

    def setup() -> None:  # pragma: no cover - runs in the child, between fork and exec
        if die_with_parent:
            # SIGKILL when the starting thread ends, even for a lab killed with -9
            _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if address_space is not None:
            # allocations past the cap fail at once instead of waking the OOM killer later
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    return setup


class Child:
    """One process the lab started; see the module's notes.

    ``on_line``: the output goes through a pipe, each line to the log file and
    then to ``on_line`` (from a reader thread); otherwise straight to the log.
    ``log_path`` None: a temporary file, removed once the child is stopped
    (its tail is kept in :attr:`output`). ``stop_signal``: what asks it to end.
    ``lifeline``: its stdin is a pipe the lab holds open, so a child that
    watches for end of file ends when the lab does, however the lab ended
    (where the kernel has no parent-death signal: macOS).
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        name: str = "",
        log_path: str | Path | None = None,
        env: dict[str, str] | None = None,
        cwd: str | Path | None = None,
        pass_fds: Sequence[int] = (),
        on_line: Callable[[str], None] | None = None,
        tail_lines: int = 400,
        stop_signal: int = signal.SIGTERM,
        address_space_limit: int | None = None,
        die_with_parent: bool = True,
        lifeline: bool = False,
    ) -> None:
        self.argv = list(argv)
        self.name = name or Path(self.argv[0]).name
        self.stop_signal = stop_signal
        self.tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
        self.output = ""
        self._lock = threading.Lock()
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if log_path is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="lab-child-")
            log_path = Path(self._tmp.name) / "output.log"
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log: IO[bytes] = open(self.log_path, "ab")  # closed in stop()
        self._log.write(("$ " + " ".join(self.argv) + "\n").encode("utf-8", "replace"))
        self._log.flush()
        self._reader: threading.Thread | None = None
        self._on_line = on_line
        self._descendants: set[Any] = set()
        self.stopped = False
        try:
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.PIPE if lifeline else subprocess.DEVNULL,
                stdout=subprocess.PIPE if on_line is not None else self._log, stderr=subprocess.STDOUT,
                env=env, cwd=cwd, pass_fds=tuple(pass_fds), start_new_session=True,
                preexec_fn=_child_setup(address_space_limit, die_with_parent),  # prctl/setrlimit only
            )
        except BaseException:
            self._log.close()
            if self._tmp is not None:
                self._tmp.cleanup()
            raise
        self.started_at = time.monotonic()
        _live.add(self)
        if on_line is not None:
            self._reader = threading.Thread(target=self._read, name=f"{self.name}-{self.proc.pid}", daemon=True)
            self._reader.start()

    # -- state ------------------------------------------------------------------
    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    def alive(self) -> bool:
        return self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def wait(self, timeout: float | None = None) -> int:
        return self.proc.wait(timeout)

    def pids(self) -> list[int]:
        """The child and every process below it, now (telemetry, the noise guard)."""
        found = [self.pid] if self.alive() else []
        found += [p.pid for p in self._tree()]
        return found

    def _tree(self) -> list[Any]:
        try:
            import psutil

            return list(psutil.Process(self.pid).children(recursive=True))
        except Exception:  # noqa: BLE001 - no psutil, or it just ended
            return []

    # -- output -------------------------------------------------------------------
    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in iter(self.proc.stdout.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            with self._lock:
                self.tail.append(line)
                if not self._log.closed:
                    self._log.write(raw if raw.endswith(b"\n") else raw + b"\n")
                    self._log.flush()
            if self._on_line is not None:
                try:
                    self._on_line(line)
                except Exception:  # noqa: BLE001 - a parser's bug must not stop the log
                    pass

    def lines(self, n: int = 40, match: Callable[[str], bool] | None = None) -> list[str]:
        """The last ``n`` output lines (those that ``match``, where any do)."""
        if self._reader is not None:
            with self._lock:
                got = list(self.tail)
        else:
            got = self._read_log().splitlines()
        if match is not None:
            picked = [ln for ln in got if match(ln)]
            got = picked or got
        return got[-n:]

    def _read_log(self) -> str:
        return self.output or _log_tail(self.log_path)

    def said(self) -> list[str]:
        """Its own output's lines, without the lines the lab adds (the command, how it ended)."""
        return [ln for ln in self._read_log().splitlines() if ln.strip() and not ln.startswith(("$ ", "# lab: "))]

    def death(self) -> str:
        """How it ended, with its last output lines (a Python fatal-signal
        stack whole, since it names the frame that died)."""
        code = self.proc.returncode
        if code is not None and code < 0:
            try:
                how = f"died of {signal.Signals(-code).name}"
            except ValueError:
                how = f"died of signal {-code}"
        elif code is None:
            how = "is still running"
        else:
            how = f"exited with status {code}"
        lines = self.said()
        fatal = max((i for i, ln in enumerate(lines) if ln.startswith("Fatal Python error")), default=None)
        lines = lines[fatal:fatal + 3 * TAIL_LINES] if fatal is not None else lines[-TAIL_LINES:]
        tail = "\n--- its last output ---\n" + "\n".join(lines) if lines else ""
        return f"{self.name} (pid {self.pid}) {how}{tail}"

    # -- stopping ------------------------------------------------------------------
    def signal(self, sig: int) -> None:
        """``sig`` to the child alone (not its group)."""
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                os.kill(self.pid, sig)

    def stop(self, grace: float = GRACE_S) -> int | None:
        """End the child and everything below it (see the module's notes) and
        reap it; safe to call again, from any path."""
        if self.stopped:
            return self.proc.returncode
        self.stopped = True
        try:
            # what it started, noted while the tree still hangs together
            self._descendants.update(self._tree())
            if self.proc.poll() is None:
                _signal_group(self.pid, self.stop_signal)
                try:
                    self.proc.wait(grace)
                except subprocess.TimeoutExpired:
                    pass
            _signal_group(self.pid, signal.SIGKILL)
            if self.proc.poll() is None:
                with contextlib.suppress(OSError):
                    os.kill(self.pid, signal.SIGKILL)
            self.proc.wait()
            end_processes([p.pid for p in self._descendants], grace=min(grace, 1.0))
        finally:
            if self.proc.stdin is not None:
                with contextlib.suppress(OSError):
                    self.proc.stdin.close()
            if self._reader is not None:
                self._reader.join(timeout=2)
            with self._lock:
                if not self._log.closed:
                    self._log.write(f"# lab: {self.name} pid {self.pid} ended, exit code {self.proc.returncode}\n"
                                    .encode())
                    self._log.close()
            self.output = _log_tail(self.log_path)
            if self._tmp is not None:
                self._tmp.cleanup()
            _live.discard(self)
        return self.proc.returncode



def _log_tail(path: Path, most: int = 64_000) -> str:
    """The last ``most`` bytes of a child's log, as text."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - most))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pgid, sig)


def end_processes(pids: Sequence[int], grace: float = GRACE_S) -> list[dict[str, Any]]:
    """SIGTERM each (its whole group where it leads one, never the lab's own
    group), SIGKILL what is left after ``grace``, all reaped where they are
    ours to reap; what was ended, by pid and name."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is a dependency
        return []
    own_group = os.getpgrp()
    procs = []
    ended: list[dict[str, Any]] = []
    for pid in pids:
        if pid == os.getpid():
            continue
        try:
            p = psutil.Process(pid)
            name = p.name()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        procs.append(p)
        ended.append({"pid": pid, "name": name})
        _signal_one(pid, own_group, signal.SIGTERM)
    _gone, alive = psutil.wait_procs(procs, timeout=grace)
    for p in alive:
        _signal_one(p.pid, own_group, signal.SIGKILL)
    psutil.wait_procs(alive, timeout=grace)
    return ended


def _signal_one(pid: int, own_group: int, sig: int) -> None:
    try:
        group = os.getpgid(pid)
        if group == pid and group != own_group:
            os.killpg(group, sig)
        else:
            os.kill(pid, sig)
    except OSError:
        pass


def descendants() -> list[int]:
    """Every live process below this one."""
    try:
        import psutil

        return [p.pid for p in psutil.Process().children(recursive=True)
                if p.status() != psutil.STATUS_ZOMBIE]
    except Exception:  # noqa: BLE001 - no process table to read
        return []


def end_descendants(grace: float = 2.0) -> list[dict[str, Any]]:
    """Stop every child this process holds, then every other process below
    it (what a plugin started and left); zombies reaped."""
    stop_all(grace)
    ended = end_processes(descendants(), grace)
    _reap_zombies()
    return ended


def _reap_zombies() -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        while True:
            pid, _status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break


def stop_all(grace: float = 2.0) -> None:
    """Stop every child this process started and still holds."""
    for child in list(_live):
        try:
            child.stop(grace=grace)
        except Exception:  # noqa: BLE001 - exiting anyway
            pass


atexit.register(stop_all)
