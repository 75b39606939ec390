"""One life cycle for a backend whose engine is a server it starts (held,
logged with pid, port and log file, waited on until it serves, stopped with
its workers by :meth:`ServerBackend.close` on every path) or attaches to
by URL (nothing started, nothing stopped)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable, Generic, TypeVar

from lab.api import Backend, BackendContext, EngineFailure
from lab.base.events import Emit, Status, StatusChanged, arm_cell
from lab.kit.server import attach
from lab.kit.server.client import ServerClient
from lab.kit.server.process import ServerProcess
from lab.kit.server.sse import FIRST_EVENT_S, IDLE_S

if TYPE_CHECKING:
    from lab.base.profile import Arm

ClientT = TypeVar("ClientT", bound=ServerClient)


def poll_ready(ready: Callable[[], bool], alive: Callable[[], bool], timeout: float, interval: float,
               not_ready: str, waiting: Callable[[], None] | None = None) -> bool:
    """Poll ``ready`` every ``interval`` seconds until the server serves
    (True) or its process exited (False); TimeoutError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        if not alive():
            return False
        if ready():
            return True
        if time.monotonic() > deadline:
            raise TimeoutError(f"{not_ready} after {timeout:.0f} s")
        if waiting is not None:
            waiting()
        time.sleep(interval)


class ServerBackend(Backend, Generic[ClientT]):
    """A backend that reads a server over HTTP: ``server`` is the process the
    arm started (None when it attached), ``attached`` the base URL of the
    server it attached to (None when it started one)."""

    def __init__(self, arm: Arm, ctx: BackendContext) -> None:
        super().__init__(arm, ctx)
        self.server: ServerProcess | None = None
        self._held: ClientT | None = None
        self._client = None
        self.attached: str | None = None
        # the attached server's pid where it listens on this machine (0: not found)
        self._attached_pid: int | None = None

    @property
    def _client(self) -> ClientT | None:
        return self._held

    @_client.setter
    def _client(self, client: ClientT | None) -> None:
        """Every client the arm holds streams within the arm's idle limits
        (``first_token_timeout_s``, ``idle_timeout_s``; see lab.kit.server.sse)."""
        if client is not None:
            opts = self.arm.options
            client.first_event_s = float(opts.get("first_token_timeout_s") or FIRST_EVENT_S)
            client.idle_s = float(opts.get("idle_timeout_s") or IDLE_S)
        self._held = client

    def launch(self, server: ServerProcess, client: ClientT, emit: Emit, *, what: str, port: int,
               ready: Callable[[], bool], timeout: float, interval: float, not_ready: str) -> bool:
        """Start ``server`` and wait until ``ready()`` says it serves: True, or
        False when its process exited while loading (its log says why);
        EngineFailure with the log's last lines after ``timeout`` seconds."""
        cell = arm_cell(self.arm.name)
        # held before it starts: close() stops and closes them whatever happens next
        self.server = server
        self._client = client
        emit(StatusChanged(cell, Status.LOADING, phase=f"starting {what}", progress=0.1))
        server.start()
        self.ctx.log(f"{self.arm.name}: {what} pid {server.pid} on port {port}, log {server.log_path}")
        # one phase change for the whole wait, not one per poll to every listener
        emit(StatusChanged(cell, Status.LOADING, phase=f"{what} loading the model", progress=0.5))
        try:
            return poll_ready(ready, server.alive, timeout, interval, not_ready)
        except TimeoutError as exc:
            raise EngineFailure(str(exc), server.excerpt(40)) from exc

    def attach_target(self) -> attach.Target:
        """Where the arm's ``url`` points, checked (loopback unless the arm
        allows remote hosts, the key from the variable it names); the base
        URL becomes ``attached``."""
        try:
            where = attach.target(self.arm.options)
        except attach.AttachError as exc:
            raise EngineFailure(f"arm {self.arm.name}: {exc}") from exc
        self.attached = where.base_url
        return where

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self.server is not None:
            self.server.stop()

    def child_pids(self) -> list[int]:
        if self.server is not None and self.server.alive() and self.server.pid is not None:
            return [self.server.pid]
        return []

    def engine_pids(self) -> list[int]:
        if self.attached is not None:
            if self._attached_pid is None:
                self._attached_pid = attach.local_listener_pid(self.attached) or 0
            return [self._attached_pid] if self._attached_pid else []
        return self.child_pids()
