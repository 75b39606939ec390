"""An arm's own process: ``python -m lab.arms.host FD MODULES`` (started by
:class:`lab.arms.handles.RemoteArm`; not a command for users).

It is a fresh interpreter, so it imports the arm's engine first (``MODULES``,
the backend's ``native_preload``: llama.cpp's libraries before numpy's BLAS
brings its own OpenMP runtime, which crashed a later ggml backend on a CUDA
host), and only then the lab. Then it serves the lab over the connection on
``FD``: one call at a time on its main thread (an engine such as MLX keeps
its work on the thread that created it), each answered once its events are
sent; the run's controls arrive on a reader thread. Events go out in
batches at most :data:`FLUSH_S` apart, so a token costs the engine's loop an
append, not a write and a wake-up of the lab.

Module-level imports here are the standard library's and
:mod:`lab.base.native`'s (itself the standard library's only): nothing may
load numpy before the preload."""

from __future__ import annotations

import faulthandler
import os
import queue
import signal
import sys
import threading
import time
from typing import Any

from lab.base.native import preload

# how long an event may wait in the arm's process before it is sent
FLUSH_S = 0.025
# a preload that fails is said once the lab can hear it
_preload_errors: list[str] = []


class _Outbox:
    """Events to the lab in batches; a reply after every event before it."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self._pending: list[Any] = []
        self._lock = threading.Lock()
        # held across taking a batch and sending it: batches and replies keep their order
        self._send_lock = threading.Lock()
        self.broken = False
        threading.Thread(target=self._flush_often, name="arm-events", daemon=True).start()

    def emit(self, event: Any) -> None:
        with self._lock:
            self._pending.append(event)

    def reply(self, message: Any) -> None:
        with self._send_lock:
            self._flush()
            self._send(message)

    def flush(self) -> None:
        """Send what is pending now (the last events, before the process ends)."""
        with self._send_lock:
            self._flush()

    def _flush_often(self) -> None:
        while not self.broken:
            time.sleep(FLUSH_S)
            with self._send_lock:
                self._flush()

    def _flush(self) -> None:
        with self._lock:
            batch, self._pending = self._pending, []
        if batch:
            self._send(("events", batch))

    def _send(self, message: Any) -> None:
        if self.broken:
            return
        try:
            self.conn.send(message)
        except (OSError, EOFError, ValueError):
            # the lab is gone; the reader thread ends this process
            self.broken = True


class _Control:
    """The run's controls as the lab last sent them (lab.runner.RunControl's
    answers), read by the arm's cells."""

    def __init__(self) -> None:
        self.stop_requested = False
        self.paused = False
        self._resume = threading.Event()
        self._resume.set()

    def set(self, stop: bool, paused: bool) -> None:
        self.stop_requested = stop
        self.paused = paused
        if paused and not stop:
            self._resume.clear()
        else:
            self._resume.set()

    def hold(self) -> float:
        t0 = time.monotonic()
        while not self._resume.wait(0.05):
            if self.stop_requested:
                break
        return time.monotonic() - t0


def _stop_asked(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def _read(conn: Any, calls: queue.Queue[Any], control: _Control) -> None:
    """The lab's messages: controls applied at once, calls queued for the
    main thread; the lab gone (end of file): stop as on SIGTERM."""
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            break
        if message[0] == "controls":
            control.set(*message[1])
        else:
            calls.put(message)
    calls.put(("exit",))
    os.kill(os.getpid(), signal.SIGTERM)


def serve(fd: int) -> int:
    from multiprocessing.connection import Connection

    conn = Connection(fd)
    setup = conn.recv()
    from lab.arms.life import ArmLife
    from lab.registry import load_registry

    outbox = _Outbox(conn)
    control = _Control()
    control.set(*setup["controls"])
    calls: queue.Queue[Any] = queue.Queue()
    threading.Thread(target=_read, args=(conn, calls, control), name="arm-controls", daemon=True).start()
    life: ArmLife | None = None
    try:
        registry = load_registry()
        life = ArmLife(setup["profile"], setup["arm"], registry, setup["run_dir"], outbox.emit, control,
                       lab_pids=[setup["lab_pid"]])
        if _preload_errors:
            from lab.base.events import Logged

            outbox.emit(Logged(f"arm {setup['arm']}: its engine's modules did not import first: "
                               + "; ".join(_preload_errors)))
        outbox.reply(("ready", os.getpid()))
        while True:
            call = calls.get()
            if call[0] == "exit":
                break
            name, args = call[0], call[1]
            result = getattr(life, name)(*args)
            outbox.reply(("returned", name, result))
    except KeyboardInterrupt:
        if life is not None:
            life.close()
        return 130
    finally:
        outbox.flush()
        sys.stdout.flush()
        sys.stderr.flush()
    if life is not None:
        life.close()
    return 0


def main(argv: list[str]) -> int:
    _preload_errors.extend(preload(argv[1] if len(argv) > 1 else ""))
    # a native crash prints the Python stack of every thread; SIGUSR1 (the lab,
    # at a deadline) prints them without ending the process
    faulthandler.enable(all_threads=True)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    signal.signal(signal.SIGTERM, _stop_asked)
    signal.signal(signal.SIGINT, _stop_asked)
    code = serve(int(argv[0]))
    # threads a plugin left are not waited for: the arm is done
    os._exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
