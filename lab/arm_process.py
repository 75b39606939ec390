"""An arm whose engine runs in the lab's process (``Backend.engine_in_process``)
runs in a child process, so a native crash costs that arm's cells, never the
run. The child runs the runner's own arm code and sends every event back; the
parent re-emits them in order, passes its controls down and stops and reaps the
child on every way out. ``LAB_ARM_PROCESS=shared`` runs every arm in the lab's.

    python -m lab.runner REQUEST EVENTS_FD CONTROL_FD   (the child; not a command for users)"""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import importlib
import os
import pickle
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from lab.base.events import Finished, RunEvent
from lab.base.profile import Arm, Profile
from lab.base.row import ResultRow
from lab.probing.isolated import STOP_GRACE_S, installed
from lab.registry import Registry

POLL_S = 0.05
# how long the zygote may take to import the lab and answer its first fork
STARTUP_S = 120.0
TAIL_LINES = 12
_FRAME = struct.Struct("!Q")

# (cancelled, skip asked, paused, this arm cancelled), as the child's RunControl takes them
Controls = tuple[bool, bool, bool, bool]


def wants_own_process(arm: Arm, registry: Registry) -> bool:
    """Whether ``arm`` runs in a child: an in-process engine, its backend and
    drafter from installed plugins (which the child finds)."""
    if os.environ.get("LAB_ARM_PROCESS", "").strip().lower() == "shared":
        return False
    cls = registry.backends.get(arm.backend)
    if cls is None or not cls.engine_in_process or not installed(cls, "lab.backends"):
        return False
    if arm.drafter is None:
        return True
    dcls = registry.drafters.get(arm.drafter)
    return dcls is not None and installed(dcls, "lab.drafters")


@dataclass(frozen=True)
class ArmRequest:
    """What the child needs to run the arm as the run's own runner would."""

    profile: Profile
    arm: str
    run_dir: str
    rows: tuple[ResultRow, ...]
    reference_ids: Mapping[tuple[str, str, int], list[int]]
    controls: Controls
    # the run's process: its CPU counts as the lab's own in the noise guard
    parent_pid: int
    # the run's environment as the arm starts (a forked child inherited its zygote's)
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))


@dataclass(frozen=True)
class Message:
    """An event (``gen_end``: a row's generation end), or the arm's reference ids, last."""

    event: RunEvent | None = None
    gen_end: float | None = None
    reference_ids: Mapping[tuple[str, str, int], list[int]] | None = None


class ArmProcess:
    """The parent's side of one arm's child process."""

    def __init__(self, request: ArmRequest, zygote: Zygote | None = None) -> None:
        body = pickle.dumps(request)
        self._tmp = tempfile.TemporaryDirectory(prefix="lab-arm-")
        path = Path(self._tmp.name) / "request.pickle"
        path.write_bytes(body)
        self._log = open(Path(self._tmp.name) / "child.log", "w+b")  # noqa: SIM115 - closed in stop()
        events_r, events_w = os.pipe()
        control_r, control_w = os.pipe()
        self.child: subprocess.Popen[bytes] | Forked
        try:
            if zygote is not None:
                self.child = zygote.fork(path, events_w, control_r, self._log.fileno())
            else:
                # its own session: a terminal's Ctrl-C reaches the lab only, which stops it
                self.child = subprocess.Popen(
                    [sys.executable, "-m", "lab.runner", str(path), str(events_w), str(control_r)],
                    stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                    pass_fds=(events_w, control_r), start_new_session=True)
        except BaseException:
            for fd in (events_r, control_w):
                os.close(fd)
            self._log.close()
            self._tmp.cleanup()
            raise
        finally:
            os.close(events_w)
            os.close(control_r)
        self._events = events_r
        self._control = control_w
        self._sent = request.controls
        self._buffer = bytearray()
        self.output = ""

    @property
    def pid(self) -> int:
        return self.child.pid

    def pids(self) -> list[int]:
        """The child and what it started, for GPU telemetry."""
        import psutil

        try:
            return [self.pid, *(p.pid for p in psutil.Process(self.pid).children(recursive=True))]
        except psutil.Error:
            return []

    def messages(self, controls: Callable[[], Controls]) -> Iterator[Message]:
        """What the child sends, in order, until it ends; ``controls`` passed down as they change."""
        while True:
            now_asked = controls()
            if now_asked != self._sent:
                self._sent = now_asked
                try:
                    os.write(self._control, bytes(now_asked))
                except OSError:
                    pass  # the child is gone: its end is read below
            if not select.select([self._events], [], [], POLL_S)[0]:
                if self.child.poll() is None:
                    continue
                return  # it ended, and what it wrote has been read
            chunk = self._read()
            if chunk is None:
                return
            yield from self._frames(chunk)

    def _read(self) -> bytes | None:
        try:
            chunk = os.read(self._events, 1 << 16)
        except OSError:
            return None
        return chunk or None

    def _frames(self, chunk: bytes) -> Iterator[Message]:
        self._buffer += chunk
        while len(self._buffer) >= _FRAME.size:
            (size,) = _FRAME.unpack_from(self._buffer)
            if len(self._buffer) < _FRAME.size + size:
                break
            body = bytes(self._buffer[_FRAME.size:_FRAME.size + size])
            del self._buffer[:_FRAME.size + size]
            yield pickle.loads(body)  # noqa: S301 - our own child's frames

    def stop(self) -> None:
        """The child ended and reaped (SIGTERM, SIGKILL after STOP_GRACE_S, its pipe
        drained meanwhile), its process group ended, its output in :attr:`output`."""
        try:
            if self.child.poll() is None:
                self.child.terminate()
                end = time.monotonic() + STOP_GRACE_S
                while self.child.poll() is None and time.monotonic() < end:
                    if select.select([self._events], [], [], POLL_S)[0] and self._read() is None:
                        with contextlib.suppress(subprocess.TimeoutExpired):
                            self.child.wait(max(0.0, end - time.monotonic()))
        finally:
            if self.child.poll() is None:
                self.child.kill()
            self.child.wait()
            _end_group(self.pid)
            for fd in (self._events, self._control):
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._log.seek(0)
            self.output = self._log.read()[-20_000:].decode("utf-8", "replace")
            self._log.close()
            self._tmp.cleanup()

    def death(self) -> str:
        """Why the child ended before the arm did, with its last output lines."""
        code = self.child.returncode
        if code is not None and code < 0:
            try:
                how = f"died of {signal.Signals(-code).name}"
            except ValueError:
                how = f"died of signal {-code}"
        else:
            how = f"exited with status {code} before the arm ended"
        lines = [line for line in self.output.splitlines() if line.strip()]
        # a fatal signal's Python stack (faulthandler) names the frame that died: keep it whole
        fatal = max((i for i, line in enumerate(lines) if line.startswith("Fatal Python error")), default=None)
        lines = lines[fatal:fatal + 3 * TAIL_LINES] if fatal is not None else lines[-TAIL_LINES:]
        tail = "\n--- its last output ---\n" + "\n".join(lines) if lines else ""
        return f"the arm's process (pid {self.pid}) {how}{tail}"


def _end_group(pgid: int) -> None:
    """SIGTERM, then SIGKILL, to what the child left in its process group."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except OSError:
            return
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            try:
                os.killpg(pgid, 0)
            except OSError:
                return
            time.sleep(POLL_S)


# -- the child ---------------------------------------------------------------
class _Sink:
    """The child runner's store: every event goes down the pipe, framed."""

    def __init__(self, fd: int, path: str, gen_end: Callable[[], float | None]) -> None:
        self.fd = fd
        self._path = Path(path)
        self._gen_end = gen_end

    @property
    def path(self) -> Path:
        return self._path

    def __call__(self, event: RunEvent) -> None:
        self.send(Message(event, self._gen_end() if isinstance(event, Finished) else None))

    def send(self, message: Message) -> None:
        body = pickle.dumps(message)
        os.write(self.fd, _FRAME.pack(len(body)))
        view = memoryview(body)
        while view:
            view = view[os.write(self.fd, view):]


def _apply(control: Any, asked: Controls, arm: str) -> None:
    cancel, skip, paused, arm_cancelled = asked
    if cancel:
        control.cancel()
    if skip:
        control.skip_arm()
    if arm_cancelled:
        control.cancel_arm(arm)
    if paused:
        control.pause()
    else:
        control.resume()


def _follow(fd: int, control: Any, arm: str) -> None:
    """The parent's controls, applied as they come; the parent gone: stop as on SIGTERM."""
    while True:
        try:
            got = os.read(fd, 4)
        except OSError:
            got = b""
        if len(got) < 4:
            break
        _apply(control, (bool(got[0]), bool(got[1]), bool(got[2]), bool(got[3])), arm)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(STOP_GRACE_S)
    os._exit(1)


def _stop_asked(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def child_main(argv: list[str], runner_cls: Any, control_cls: Any) -> int:
    """The child: run the request's arm with ``runner_cls`` and its
    ``control_cls`` (given, so this module does not import the runner), send
    every event, then the arm's reference ids. Exits without waiting for
    threads a plugin left."""
    from lab.registry import load_registry

    if argv[0] == "--zygote":
        for module in filter(None, argv[2].split(",")):
            with contextlib.suppress(Exception):  # the arm's process imports it itself, and says why it fails
                importlib.import_module(module)
        return _zygote(socket.socket(fileno=int(argv[1])), load_registry(), runner_cls, control_cls)
    _child(Path(argv[0]), int(argv[1]), int(argv[2]), load_registry(), runner_cls, control_cls)
    return 1


def _child(path: Path, events: int, control_fd: int, registry: Registry, runner_cls: Any, control_cls: Any) -> None:
    signal.signal(signal.SIGTERM, _stop_asked)
    signal.signal(signal.SIGINT, _stop_asked)
    faulthandler.enable()
    request: ArmRequest = pickle.loads(path.read_bytes())  # noqa: S301 - written by the run's process
    os.environ.clear()
    os.environ.update(request.environ)
    control = control_cls()
    _apply(control, request.controls, request.arm)
    runner: Any = None
    sink = _Sink(events, request.run_dir, lambda: runner._gen_end if runner is not None else None)
    code = 0
    try:
        store, listeners = (sink, []) if request.run_dir else (None, [sink])
        runner = runner_cls(request.profile, registry, store, listeners, control)
        runner.restore(request.rows, request.reference_ids, [request.parent_pid])
        threading.Thread(target=_follow, args=(control_fd, control, request.arm), daemon=True,
                         name="arm-controls").start()
        arm = request.profile.arm(request.arm)
        runner.run_arm_here(arm)
        with runner._emit_lock:  # a plugin's thread may still log
            sink.send(Message(reference_ids={k: v for k, v in runner.reference_ids.items() if k[0] == arm.name}))
    except KeyboardInterrupt:
        code = 130
    except BaseException:  # noqa: BLE001 - said in the output the parent keeps
        import traceback

        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


# -- a zygote: the lab imported once, each arm's child forked from it (Linux) --
_RECORD = struct.Struct("!cii")


def can_fork() -> bool:
    """Forking without exec is safe where the zygote has touched no engine
    and the platform allows it (macOS frameworks refuse a forked child)."""
    return sys.platform.startswith("linux") and os.environ.get("LAB_ARM_PROCESS", "").strip().lower() != "spawn"


class Zygote:
    """A process that imported the lab and loaded the plugins once and forks
    each arm's child (``b"p"`` its pid, ``b"x"`` its wait status once reaped)."""

    def __init__(self, preload: tuple[str, ...] = ()) -> None:
        mine, theirs = socket.socketpair()
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "lab.runner", "--zygote", str(theirs.fileno()),
                                          ",".join(preload)],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         pass_fds=(theirs.fileno(),), start_new_session=True)
        finally:
            theirs.close()
        self.sock = mine
        self.exits: dict[int, int] = {}
        self._buffer = b""
        self._pids: list[int] = []
        self.alive = True

    def fork(self, request: Path, events: int, control: int, log: int) -> Forked:
        socket.send_fds(self.sock, [str(request).encode()], [events, control, log])
        while not self._pids:
            if not self.read(STARTUP_S):
                raise RuntimeError("the arm processes' zygote did not answer")
        return Forked(self, self._pids.pop(0))

    def read(self, wait_s: float) -> bool:
        """Take what the zygote said within ``wait_s``; False once it is gone."""
        if not self.alive:
            return False
        if select.select([self.sock], [], [], wait_s)[0]:
            try:
                got = self.sock.recv(4096)
            except OSError:
                got = b""
            if not got:
                self.alive = False
                return False
            self._buffer += got
            while len(self._buffer) >= _RECORD.size:
                kind, pid, status = _RECORD.unpack_from(self._buffer)
                self._buffer = self._buffer[_RECORD.size:]
                if kind == b"p":
                    self._pids.append(pid)
                else:
                    self.exits[pid] = status
        return True

    def close(self) -> None:
        """The zygote ends (it stops any child it still has) and is reaped."""
        self.sock.close()
        try:
            self.proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# This process's zygote, by what it preloaded and the environment its imports saw
# (the lab's settings, the import path): kept across runs while both stay, ended at exit.
_held: tuple[object, Zygote] | None = None
_held_lock = threading.Lock()
_fork_failed = False


def start(request: ArmRequest, preload: tuple[str, ...], log: Callable[[str], None]) -> ArmProcess:
    """An arm's process: forked from this process's zygote (``preload``
    imported) where :func:`can_fork`, else a fresh interpreter."""
    global _held, _fork_failed
    if can_fork() and not _fork_failed:
        try:
            key = (preload, sorted((k, v) for k, v in os.environ.items() if k.startswith("LAB_") or k == "PYTHONPATH"))
            with _held_lock:
                if _held is None or _held[0] != key or not _held[1].alive:
                    close_zygote()
                    _held = (key, Zygote(preload))
                return ArmProcess(request, _held[1])
        except Exception as exc:  # noqa: BLE001 - a fresh interpreter still serves
            log(f"arm {request.arm}: no zygote to fork from ({type(exc).__name__}: {exc}); a fresh interpreter")
            _fork_failed = True
    return ArmProcess(request)


def zygote_pid() -> int | None:
    """The kept zygote's pid: it imports no engine, and outlives each run by design."""
    return _held[1].proc.pid if _held is not None and _held[1].alive else None


@atexit.register
def close_zygote() -> None:
    global _held
    if _held is not None:
        _held[1].close()
        _held = None


class Forked:
    """An arm's child forked by the zygote, as much of ``subprocess.Popen`` as
    :class:`ArmProcess` uses."""

    def __init__(self, zygote: Zygote, pid: int) -> None:
        self.zygote = zygote
        self.pid = pid
        self.returncode: int | None = None

    def poll(self, wait_s: float = 0.0) -> int | None:
        if self.returncode is None:
            self.zygote.read(wait_s)
            status = self.zygote.exits.pop(self.pid, None)
            if status is not None:
                self.returncode = os.waitstatus_to_exitcode(status)
            elif not self.zygote.alive and not _running(self.pid):
                self.returncode = -signal.SIGKILL  # its zygote died, its status with it
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = time.monotonic() + (timeout if timeout is not None else 1e9)
        while self.poll(POLL_S) is None:
            if time.monotonic() > end:
                raise subprocess.TimeoutExpired("arm process", timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(OSError):
                os.kill(self.pid, sig)


def _running(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _zygote(sock: socket.socket, registry: Registry, runner_cls: Any, control_cls: Any) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    children: set[int] = set()
    while True:
        if select.select([sock], [], [], POLL_S)[0]:
            try:
                got, fds, _flags, _addr = socket.recv_fds(sock, 4096, 3)
            except OSError:
                got, fds = b"", []
            if not got or len(fds) != 3:
                break
            pid = os.fork()
            if pid == 0:
                sock.close()
                os.setsid()
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                os.dup2(fds[2], 1)
                os.dup2(fds[2], 2)
                os.close(fds[2])
                try:
                    _child(Path(got.decode()), fds[0], fds[1], registry, runner_cls, control_cls)
                finally:
                    os._exit(1)
            for fd in fds:
                os.close(fd)
            children.add(pid)
            sock.sendall(_RECORD.pack(b"p", pid, 0))
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if not pid:
                break
            children.discard(pid)
            sock.sendall(_RECORD.pack(b"x", pid, status))
    for pid in children:  # the run's process is gone: so are its arms
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return 0
