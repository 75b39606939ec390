"""How the runner holds an arm: :class:`RemoteArm` in a process of its own
(every arm whose plugins a fresh interpreter can find), :class:`LocalArm` in
the lab's (``LAB_ARM_PROCESS=shared``, or a plugin registered by hand).
Both answer the same calls as :class:`lab.arms.life.ArmLife`.

A remote arm's every call has a deadline (:class:`lab.base.profile.Deadlines`):
the longest it may go without a sign of life (an event of the arm's: a token,
a step, a status, a log line; memory samples do not count, and time the run
is paused does not either). Past it, the arm's process is asked for every
thread's stack (SIGUSR1), ended with all it started, and the call's outcome
names the call, the deadline and the frames it hung in. A process that dies
makes its call's outcome ``crashed`` with how it died and its last lines."""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from multiprocessing import Pipe
from typing import TYPE_CHECKING, Any, Callable, Sequence, Union

from lab.arms.life import ArmLife, CellOutcome, Closed, Controls, Opened, References
from lab.base.cells import Cell, Status
from lab.base.events import Held, MemorySample, RunEvent
from lab.base.profile import Arm, Profile
from lab.kit.children import Child

if TYPE_CHECKING:
    from lab.registry import Registry

POLL_S = 0.05
# what a deadline adds before it ends the process: an engine's own limit
# (a server stream's idle limit) says more, so it speaks first
SLACK_S = 5.0
# how long the process may take to print its threads' stacks
STACKS_S = 1.0
# how long a fresh interpreter may take to import the lab and its engine
START_S = 120.0
# a plugin call by the name the report gives it, as a row says "load() hung"
CALLS = {"open": "load", "cell": "generate", "close": "close", "reference": "reference"}
# functions that are a plugin's part of a call, innermost first in a stack
_PLUGIN_CALLS = ("draft", "begin", "forget", "attach_drafter", "load", "generate", "reset_round",
                 "measure_reference", "close", "report")


class ArmEnded(Exception):
    """The arm's process is gone (died or ended at a deadline); ``outcome``
    is what the call that saw it comes to."""

    def __init__(self, status: Status, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


class LocalArm:
    """An arm in the lab's own process: its calls run here, in order; no
    deadline can end a call (nothing to end but the lab)."""

    process = "shared"

    def __init__(self, profile: Profile, arm: Arm, registry: Registry, run_dir: str,
                 emit: Callable[[RunEvent], None], control: Controls) -> None:
        self.life = ArmLife(profile, arm.name, registry, run_dir, emit, control)

    def open(self) -> Opened:
        return self.life.open()

    def cell(self, cell: Cell, references: References) -> CellOutcome:
        return self.life.cell(cell, references)

    def reference_when(self) -> str | None:
        return self.life.reference_when()

    def reference(self, prompt: str | None, prompt_tokens: int | None) -> dict[str, Any]:
        return self.life.reference(prompt, prompt_tokens)

    def close(self) -> Closed:
        return self.life.close()

    def pids(self) -> list[int]:
        backend = self.life.backend
        return backend.child_pids() if backend is not None else []

    def end(self) -> None:
        self.life.close()


class RemoteArm:
    """An arm in its own process (:mod:`lab.arms.host`), driven call by call."""

    def __init__(self, profile: Profile, arm: Arm, run_dir: str, preload: Sequence[str],
                 emit: Callable[[RunEvent], None], control: Any, asked: Callable[[], tuple[bool, bool]]) -> None:
        """``asked()``: (stop requested for this arm, paused), polled while a call runs."""
        self.arm = arm
        self.emit = emit
        self.control = control
        self.asked = asked
        self.ended: ArmEnded | None = None
        self._held = False
        ours, theirs = Pipe(duplex=True)
        try:
            self.child = Child([sys.executable, "-m", "lab.arms.host", str(theirs.fileno()), ",".join(preload)],
                               name=f"the arm's process ({arm.name})", pass_fds=[theirs.fileno()])
        finally:
            theirs.close()
        self.conn = ours
        self.process = f"own (pid {self.child.pid})"
        self._sent = asked()
        self._when: str | None = None
        try:
            self.conn.send({"profile": profile, "arm": arm.name, "run_dir": run_dir, "controls": self._sent,
                            "lab_pid": os.getpid()})
            self._wait("ready", START_S, "start")
        except ArmEnded:
            pass  # said by the first call

    # -- calls -------------------------------------------------------------------------
    def open(self) -> Opened:
        try:
            return self._call("open", (), self.arm.deadlines.load)
        except ArmEnded as end:
            return Opened(end.status, end.detail)

    def cell(self, cell: Cell, references: References) -> CellOutcome:
        try:
            return self._call("cell", (cell, references), self.arm.deadlines.generate)
        except ArmEnded as end:
            return CellOutcome(cell, end.status, detail=end.detail, crashed=end.status == Status.CRASHED,
                               ended=True)

    def reference_when(self) -> str | None:
        try:
            return self._call("reference_when", (), self.arm.deadlines.close)
        except ArmEnded:
            return None

    def reference(self, prompt: str | None, prompt_tokens: int | None) -> dict[str, Any]:
        try:
            return self._call("reference", (prompt, prompt_tokens), self.arm.deadlines.reference)
        except ArmEnded as end:
            return {"tool": "?", "error": end.detail}

    def close(self) -> Closed:
        try:
            return self._call("close", (), self.arm.deadlines.close)
        except ArmEnded as end:
            return Closed(left_behind={"close_errors": [end.detail]}, said=False)

    def pids(self) -> list[int]:
        return self.child.pids()

    def end(self, grace: float = 5.0) -> None:
        """The process asked to exit, then ended with all it started, reaped."""
        if self.child.alive() and self.ended is None:
            try:
                self.conn.send(("exit",))
                self.child.wait(min(grace, 2.0))
            except Exception:  # noqa: BLE001 - ended below either way
                pass
        self.child.stop(grace)
        self.conn.close()

    # -- the wire ------------------------------------------------------------------------
    def _call(self, name: str, args: tuple[Any, ...], deadline: float) -> Any:
        if self.ended is not None:
            raise ArmEnded(self.ended.status, self.ended.detail)
        try:
            self.conn.send((name, args))
        except (OSError, ValueError):
            pass  # it died: said below
        return self._wait(name, deadline + SLACK_S, CALLS.get(name, name), deadline)

    def _wait(self, name: str, limit: float, call: str, deadline: float | None = None) -> Any:
        last = time.monotonic()
        while True:
            asked = self.asked()
            if asked != self._sent:
                self._sent = asked
                try:
                    self.conn.send(("controls", asked))
                except (OSError, ValueError):
                    pass
            got = None
            try:
                if self.conn.poll(POLL_S):
                    got = self.conn.recv()
            except (EOFError, OSError):
                raise self._died(call) from None
            if got is None:
                if not self.child.alive():
                    raise self._died(call)
                if self._held or asked[1]:
                    last = time.monotonic()  # paused time is nobody's hang
                elif time.monotonic() - last > limit:
                    raise self._hung(call, deadline if deadline is not None else limit)
                continue
            if got[0] == "events":
                for event in got[1]:
                    if not isinstance(event, MemorySample):
                        last = time.monotonic()
                    if isinstance(event, Held):
                        self._held = event.seconds is None
                    self.emit(event)
            elif got[0] in ("returned", "ready"):
                return got[-1]

    def _died(self, call: str) -> ArmEnded:
        self.child.stop()
        self.ended = ArmEnded(Status.CRASHED, f"during {call}(): {self.child.death()}")
        return self.ended

    def _hung(self, call: str, deadline: float) -> ArmEnded:
        self.child.signal(signal.SIGUSR1)
        time.sleep(STACKS_S)
        self.child.stop()
        frames = hung_frames(self.child.output)
        where = ""
        inner = next((f for f in frames if f[2] in _PLUGIN_CALLS), None)
        if inner is not None:
            where = f" It was in {inner[2]}() ({_short(inner[0])}:{inner[1]})."
        trail = " <- ".join(f"{fn} ({_short(path)}:{line})" for path, line, fn in frames[:6])
        key = CALLS.get(call, call) if call in CALLS else call
        detail = (f"{call}() hung: no sign of life for {deadline:g} s (the arm's deadline; raise it with "
                  f"deadlines = {{ {key} = SECONDS }} on the arm). The arm's process was ended.{where}"
                  + (f"\n--- its stack, innermost first ---\n{trail}" if trail else ""))
        self.ended = ArmEnded(Status.ERROR, detail)
        return self.ended


_THREAD = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-f]+ .*most recent call first")
_FRAME = re.compile(r'^\s+File "(?P<path>[^"]+)", line (?P<line>\d+) in (?P<fn>\S+)')


def hung_frames(output: str) -> list[tuple[str, int, str]]:
    """The frames, innermost first, of the main thread's stack in the last
    stack dump in ``output`` (faulthandler's form): the thread running the
    arm's calls, whose frames pass through the host's serve loop."""
    blocks: list[list[tuple[str, int, str]]] = []
    current: list[tuple[str, int, str]] | None = None
    for line in output.splitlines():
        if _THREAD.match(line):
            current = []
            blocks.append(current)
            continue
        m = _FRAME.match(line)
        if m and current is not None:
            current.append((m["path"], int(m["line"]), m["fn"]))
        elif current is not None and line.strip() and not line.startswith(" "):
            current = None
    for block in reversed(blocks):
        if any(path.endswith(os.path.join("arms", "host.py")) and fn == "serve" for path, _, fn in block):
            return block
    return blocks[-1] if blocks else []


def _short(path: str) -> str:
    parts = path.replace("\\", "/").split("/")
    return "/".join(parts[-2:])


Handle = Union[LocalArm, RemoteArm]


def own_process(arm: Arm, registry: Registry) -> bool:
    """Whether ``arm`` runs in a process of its own: its backend and drafter
    come from installed plugins (which a fresh interpreter finds), unless
    ``LAB_ARM_PROCESS=shared`` keeps every arm in the lab's process."""
    from lab.probing.isolated import installed

    if os.environ.get("LAB_ARM_PROCESS", "").strip().lower() == "shared":
        return False
    cls = registry.backends.get(arm.backend)
    if cls is None or not installed(cls, "lab.backends"):
        return False
    if arm.drafter is None:
        return True
    dcls = registry.drafters.get(arm.drafter)
    return dcls is not None and installed(dcls, "lab.drafters")


def start_arm(profile: Profile, arm: Arm, registry: Registry, run_dir: str, emit: Callable[[RunEvent], None],
              control: Any) -> Handle:
    """The arm's handle: in a process of its own where :func:`own_process`,
    else in this one. ``control``: the run's :class:`lab.arms.control.RunControl`."""
    if own_process(arm, registry):
        return RemoteArm(profile, arm, run_dir, registry.backend(arm.backend).native_preload, emit, control,
                         lambda: (control.stop_requested or control.arm_cancelled(arm.name), control.paused))
    return LocalArm(profile, arm, registry, run_dir, emit, control)
