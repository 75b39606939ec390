"""One arm's engine from load to close, in whatever process holds it.

:class:`ArmLife` is the only code that calls an arm's plugins: it builds and
loads the backend and its drafter, runs one cell when asked (warmup or
measured, the engine reset between cold rounds), times the engine's own
reference tool, and closes everything on every path. The runner decides the
order of cells and builds the rows; the same ArmLife runs in the lab's
process (:class:`lab.arms.handles.LocalArm`) or in the arm's own
(:mod:`lab.arms.host`). A plugin's failure is an outcome, never an exception
(Ctrl-C and SIGTERM apart)."""

from __future__ import annotations

import dataclasses
import os
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Generic, Mapping, Protocol, Sequence, TypeVar

from lab.api import (
    Backend,
    BackendContext,
    Cancelled,
    Drafter,
    DrafterContext,
    Drafting,
    DraftModelHost,
    EngineFailure,
    Generation,
    GenerationRequest,
    Referencing,
)
from lab.base.cells import Cell, Status
from lab.base.events import Event, Held, RunEvent, StatusChanged, TokenEvent, arm_cell, now
from lab.base.profile import Arm, Profile, RunSettings
from lab.rows.bounds import bounded_report
from lab.rows.build import add_origin
from lab.telemetry.contention import Contention, ContentionWatcher
from lab.telemetry.latency import ArrivalClock, LatencyShape
from lab.telemetry.leftovers import Leftovers
from lab.telemetry.memory import MemorySampler, rss_bytes

if TYPE_CHECKING:
    from lab.registry import Registry

# (baseline arm, prompt, round) -> that cell's output ids
References = Mapping[tuple[str, str, int], Sequence[int]]


class Controls(Protocol):
    """What an arm reads of the run's controls while a cell runs: whether to
    stop, and whether to hold (a pause), as :class:`lab.runner.RunControl`
    answers them; the host keeps a copy the lab's controls update."""

    @property
    def stop_requested(self) -> bool: ...

    @property
    def paused(self) -> bool: ...

    def hold(self) -> float:
        """Block while paused; the seconds held."""
        ...


@dataclass(frozen=True)
class Opened:
    """How loading went: ``ok``, or the status and why every cell fails."""

    status: Status
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == Status.OK


@dataclass(frozen=True)
class CellOutcome:
    """One cell as the engine ran it; the runner makes its row."""

    cell: Cell
    status: Status
    gen: Generation | None = None
    detail: str = ""
    peak: int | None = None
    # the arm's own process (RSS) just before its model loaded: what the
    # memory estimate's process share is held to in this run
    process: int | None = None
    origin: tuple[tuple[int, ...], ...] | None = None
    latency: LatencyShape | None = None
    contention: Contention | None = None
    # when the generation returned (lab.base.events.now), for the GPU's energy window
    gen_end: float | None = None
    # the engine died: the arm's later cells do not run
    crashed: bool = False
    # the arm's process was ended (a deadline): its later cells do not run
    ended: bool = False


@dataclass(frozen=True)
class Closed:
    """What closing left: the arm's report (saved with the run) and what its
    plugins left behind or failed at (empty when nothing)."""

    report: Mapping[str, Any] = field(default_factory=dict)
    left_behind: Mapping[str, Any] = field(default_factory=dict)
    # whether the arm's report was emitted where it closed (not when its process was ended first)
    said: bool = True


T = TypeVar("T")


@dataclass(frozen=True)
class Called(Generic[T]):
    """A plugin call's result or what it raised instead (Ctrl-C and SIGTERM
    go on up: they stop the lab, not the plugin); the one place a plugin's
    failure turns into data."""

    value: T | None
    failure: BaseException | None = None
    trace: str = ""

    @classmethod
    def of(cls, call: Callable[[], T]) -> Called[T]:
        try:
            return cls(call())
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - whatever a plugin raises, SystemExit too, is its failure
            return cls(None, exc, traceback.format_exc())

    @property
    def ok(self) -> bool:
        return self.failure is None


def named(exc: BaseException) -> str:
    """A plugin's failure in a row's words: SystemExit says it was an exit."""
    if isinstance(exc, SystemExit):
        return f"SystemExit: a plugin called exit({exc.code!r}); the lab went on"
    return f"{type(exc).__name__}: {exc}"


def failure_detail(exc: EngineFailure) -> str:
    text = str(exc)
    if exc.log_excerpt:
        text += "\n--- engine log ---\n" + exc.log_excerpt
    return text


def hold(control: Controls, emit: Callable[[RunEvent], None], cell: Cell, in_cell: bool) -> float:
    """Wait here while the run is paused; the seconds held."""
    if not control.paused or control.stop_requested:
        return 0.0
    emit(Held(cell, None, in_cell))
    seconds = control.hold()
    emit(Held(cell, seconds, in_cell))
    return seconds


def attach_drafter(dcls: type[Drafter], arm: Arm, backend: Drafting, run: RunSettings,
                   reference: Callable[[str, int], Sequence[int] | None], log: Callable[[str], None],
                   seed: int | None = None) -> Drafter:
    """The arm's drafter built for the loaded backend, loaded and attached
    (closed again if loading fails): for runs and the lossless check."""
    dctx = DrafterContext(
        stack=arm.stack, target_model=arm.model, vocab_size=backend.vocab_size(),
        n_ctx=run.n_ctx, threads=run.threads, seed=run.seed if seed is None else seed,
        temperature=run.temperature, reference=reference, log=log,
        draft_model=backend.draft_model if isinstance(backend, DraftModelHost) else None,
    )
    drafter = dcls(arm.drafter_options, dctx)
    try:
        drafter.load()
        backend.attach_drafter(drafter)
    except BaseException:
        drafter.close()
        raise
    return drafter


def request_for(profile: Profile, arm: Arm, cell: Cell) -> GenerationRequest:
    """The request a cell sends: its prompt, the run's settings, the arm's n_max."""
    run = profile.run
    prompt = next(p for p in profile.prompts if p.name == cell.prompt)
    return GenerationRequest(
        cell=cell, prompt=prompt.text, system=prompt.system, chat_template=run.chat_template,
        max_tokens=max_tokens(run, cell), temperature=run.temperature, seed=run.seed,
        ignore_eos=run.ignore_eos, n_max=arm.n_max, acceptance=arm.set_rates, draft_policy=arm.draft_policy,
    )


def max_tokens(run: RunSettings, cell: Cell) -> int:
    """What a cell's request asks for: a warmup's own length where set."""
    return min(run.max_tokens, run.warmup_tokens) if cell.is_warmup and run.warmup_tokens else run.max_tokens


class ArmLife:
    """One arm's plugins, loaded once, run cell by cell, closed once."""

    def __init__(self, profile: Profile, arm: str, registry: Registry, run_dir: str, emit: Callable[[RunEvent], None],
                 control: Controls, lab_pids: Sequence[int] = ()) -> None:
        self.profile = profile
        self.arm = profile.arm(arm)
        self.registry = registry
        self.run_dir = run_dir
        self.emit = emit
        self.control = control
        self.lab_pids = list(lab_pids)
        self.backend: Backend | None = None
        self.drafter: Drafter | None = None
        self.references: dict[tuple[str, str, int], list[int]] = {}
        self._engine_bytes: int | None = None
        self._sampler: MemorySampler | None = None
        self.process_bytes: int | None = None  # this process before the model loaded (RSS)
        self._watcher: ContentionWatcher | None = None
        self._leftovers: Leftovers | None = None
        # whether the engine generated since it loaded (or was last reset)
        self._used = False
        self._closed = False

    def _log(self, text: str) -> None:
        from lab.base.events import Logged

        self.emit(Logged(text))

    # -- load ---------------------------------------------------------------------
    def open(self) -> Opened:
        """Build and load the backend and its drafter; the samplers start."""
        arm = self.arm
        self._leftovers = Leftovers.before_arm()
        built = Called.of(lambda: self.registry.backend(arm.backend)(
            arm, BackendContext(self.profile.run, self.run_dir, self._log)))
        if built.value is None:
            return self._failed(built, lambda exc: Opened(Status.ERROR, f"load failed: {named(exc)}"))
        backend = self.backend = built.value
        self.process_bytes = rss_bytes([os.getpid()]) or None
        loaded = Called.of(lambda: self._load(backend))
        self._idle()
        if loaded.failure is None:
            return Opened(Status.OK)
        return self._failed(loaded, lambda exc: Opened(exc.status, failure_detail(exc)) if isinstance(exc, EngineFailure)
                            else Opened(Status.ERROR, f"load failed: {named(exc)}"))

    def _failed(self, called: Called[Any], outcome: Callable[[BaseException], T]) -> T:
        """What a plugin's failed call comes to; its traceback goes to the run's log
        (an engine's own failure says enough by itself)."""
        assert called.failure is not None
        if not isinstance(called.failure, (EngineFailure, Cancelled)):
            self._log(called.trace)
        return outcome(called.failure)

    def _load(self, backend: Backend) -> None:
        """The samplers started, the engine loaded, the drafter attached."""
        arm = self.arm
        cell0 = arm_cell(arm.name)
        self._sampler = MemorySampler(arm.name, self.emit, self.profile.run.memory_interval_s,
                                      child_pids=backend.child_pids, engine_bytes=lambda: self._engine_bytes)
        # the noise guard: other processes' CPU use while this arm's cells run
        self._watcher = ContentionWatcher(arm.name, type(backend).busy_cores(arm.options, self.profile.run.threads),
                                          lambda: [*backend.engine_pids(), *self.lab_pids])
        self._sampler.start()
        self._watcher.start()
        self.emit(StatusChanged(cell0, Status.LOADING, phase="loading"))
        backend.load(self.emit)
        if arm.drafter is not None:
            if not isinstance(backend, Drafting):
                raise TypeError(f"backend {arm.backend} does not run drafter plugins")
            self.emit(StatusChanged(cell0, Status.LOADING, phase=f"loading drafter {arm.drafter}"))
            self.drafter = attach_drafter(self.registry.drafter(arm.drafter), arm, backend, self.profile.run,
                                          self._reference, self._log)
        self._engine_bytes = backend.engine_bytes()

    def _idle(self) -> None:
        """Between its cells an arm's samplers sleep (others may run meanwhile)."""
        for sampler in (self._sampler, self._watcher):
            if sampler is not None:
                sampler.pause()

    def _busy(self) -> None:
        for sampler in (self._sampler, self._watcher):
            if sampler is not None:
                sampler.resume()

    def _reference(self, prompt: str, round: int) -> Sequence[int] | None:
        """The baseline's output ids the drafter may replay (the oracle);
        a warmup (round 0) replays round 1's where there is one."""
        if self.arm.baseline is None:
            return None
        for r in (round, 1, 0):
            ids = self.references.get((self.arm.baseline, prompt, r))
            if ids is not None:
                return ids
        return None

    @property
    def peak(self) -> int | None:
        return self._sampler.peak if self._sampler is not None else None

    # -- one cell -------------------------------------------------------------------
    def cell(self, cell: Cell, references: References = {}) -> CellOutcome:  # noqa: B006 - read only
        """Run ``cell`` (a warmup when its round is 0) on the loaded engine."""
        self.references.update({k: list(v) for k, v in references.items()})
        backend = self.backend
        if backend is None:
            return CellOutcome(cell, Status.ERROR, detail="the arm's engine is not loaded")
        self._busy()
        try:
            return self._cell(cell, backend)
        finally:
            self._idle()

    def _cell(self, cell: Cell, backend: Backend) -> CellOutcome:
        arm = self.arm
        run_settings = self.profile.run
        status = Status.WARMUP if cell.is_warmup else Status.RUNNING
        self.emit(StatusChanged(cell, status, phase="warming up" if cell.is_warmup else "running"))
        held = [0.0]
        pausable = backend.pauses_between_steps()
        origin: list[list[int]] = []
        clock = ArrivalClock(now())
        emit = self.emit

        def collect(event: Event) -> None:
            if isinstance(event, TokenEvent):
                add_origin(origin, len(event.text), event.from_draft)
                clock.token(event.t, len(event.ids))
            emit(event)

        def cancelled() -> bool:
            if pausable:
                seconds = hold(self.control, emit, cell, in_cell=True)
                held[0] += seconds
                clock.held(seconds)
            return self.control.stop_requested

        watcher = self._watcher

        def run() -> tuple[Generation, Contention | None, float | None, float]:
            reset_s: float | None = None
            # warm rounds still start cold: round 1 meets the engine as loaded,
            # warmup or not, and the later rounds are held to it
            if self._used and not cell.is_warmup and (not run_settings.warm_rounds or cell.round == 1):
                reset_s = self._reset_round(cell, backend)
                self._used = False
                emit(StatusChanged(cell, status, phase="running"))
            self._used = True
            mark = watcher.mark() if watcher is not None else None
            # the request goes in now: the time to first token counts from here
            clock.start = now()
            gen = backend.generate(request_for(self.profile, arm, cell), collect, cancelled)
            gen_end = now()
            if not isinstance(gen, Generation):
                raise TypeError(f"backend {arm.backend}: generate() returned {type(gen).__name__}, not a Generation")
            busy = watcher.reading(mark) if watcher is not None and mark is not None else None
            return gen, busy, reset_s, gen_end

        called = Called.of(run)
        if called.value is None:
            return self._failed(called, lambda exc: self._failed_cell(cell, exc))
        gen, busy, reset_s, gen_end = called.value
        if self._sampler is not None:
            self._sampler.sample()
        if reset_s is not None:
            gen = dataclasses.replace(gen, engine_report={**gen.engine_report, "round_reset_s": round(reset_s, 3)})
        if held[0]:
            # Held between steps: no step was timed across the pause, only the
            # cell's generation clock ran on.
            gen = dataclasses.replace(gen, gen_s=gen.gen_s - held[0],
                                      engine_report={**gen.engine_report, "paused_s": held[0]})
        return CellOutcome(cell, Status.OK, gen, peak=self.peak, process=self.process_bytes,
                           origin=tuple(tuple(o) for o in origin),
                           latency=clock.shape(), contention=busy, gen_end=gen_end)

    def _failed_cell(self, cell: Cell, exc: BaseException) -> CellOutcome:
        if isinstance(exc, Cancelled):
            return CellOutcome(cell, Status.CANCELLED, detail="cancelled", peak=self.peak, process=self.process_bytes)
        if isinstance(exc, EngineFailure):
            return CellOutcome(cell, exc.status, detail=failure_detail(exc), peak=self.peak, process=self.process_bytes,
                               crashed=exc.status == Status.CRASHED)
        # SystemExit from a plugin is its arm's error too
        return CellOutcome(cell, Status.ERROR, detail=named(exc), peak=self.peak, process=self.process_bytes)

    def _reset_round(self, cell: Cell, backend: Backend) -> float:
        """Bring the engine (and a drafter that keeps state) back to the state
        the arm's first cell met, before the cell's clock starts: the seconds
        it took, kept out of every measurement."""
        start = now()
        if type(backend).round_state(self.arm.options) != "none":
            self.emit(StatusChanged(cell, Status.LOADING, phase="resetting engine state between rounds"))
            backend.reset_round(self.emit)
        if self.drafter is not None and type(self.drafter).keeps_state:
            self.drafter.forget()
        return now() - start

    # -- the engine's own figure for a baseline ([run] reference) -----------------
    def reference_when(self) -> str | None:
        """When this baseline's reference is measured: ``"loaded"`` (before
        close), ``"closed"`` (its tool loads the model itself), or None."""
        backend = self.backend
        if backend is None or not (self.profile.run.reference and self.arm.is_baseline):
            return None
        if not type(backend).reference_tool(self.arm.options):
            return None
        if isinstance(backend, Referencing) and not backend.reference_needs_load():
            return "closed"
        return "loaded"

    def reference(self, prompt: str | None, prompt_tokens: int | None) -> dict[str, Any]:
        """Time the baseline's plain decoding with the engine's own tool, on
        ``prompt`` (the first with a row) at that row's depth; a failure is
        recorded in its place."""
        from lab.base.events import ReferenceMeasured

        arm = self.arm
        backend = self.backend
        tool = type(backend).reference_tool(arm.options) if backend is not None else None
        record: dict[str, Any] = {"tool": tool or "?"}
        if prompt is None:
            record["error"] = "not measured: the arm has no row to compare it with"
        elif not isinstance(backend, Referencing):
            record["error"] = f"not measured: backend {arm.backend} names {tool} but has no Referencing capability"
        else:
            record["prompt"] = prompt
            self.emit(ReferenceMeasured(arm.name, dict(record), done=False))
            start = now()
            # the noise guard, as over a cell: a reference taken on a busy machine says so
            watcher = ContentionWatcher(f"{arm.name}-reference",
                                        type(backend).busy_cores(arm.options, self.profile.run.threads),
                                        lambda: [*backend.engine_pids(), *self.lab_pids])
            def measure(backend: Referencing = backend) -> tuple[dict[str, Any], Contention]:
                with watcher:
                    mark = watcher.mark()
                    got = backend.measure_reference(request_for(self.profile, arm, Cell(arm.name, prompt, 1)),
                                                    prompt_tokens)
                    return got, watcher.reading(mark)

            # a reference that fails costs its line, never the run
            called = Called.of(measure)
            if called.value is None:
                record["error"] = self._failed(called, named)
            else:
                got, busy = called.value
                record.update(got)
                record["contention"] = round(busy.others_cores, 3)
                record["contended"] = busy.contended
                if busy.contended:
                    record["contention_note"] = busy.note()
                record["when"] = ("after the arm's cells, its engine still loaded" if backend.reference_needs_load()
                                  else "after the arm's cells, its engine closed")
            record["seconds"] = round(now() - start, 3)
        self.emit(ReferenceMeasured(arm.name, record))
        return record

    # -- close --------------------------------------------------------------------------
    def close(self) -> Closed:
        """The drafter and the engine closed, the arm's report taken, what
        its plugins left running ended; once, whatever happened before."""
        from lab.base.events import ArmReported

        if self._closed:
            return Closed()
        self._closed = True
        failed: list[str] = []
        report: dict[str, Any] = {}
        try:
            drafter, backend = self.drafter, self.backend
            # a plugin's close must not end the run: each failure is named in the arm's report
            if drafter is not None:
                closed = Called.of(drafter.close)
                if not closed.ok:
                    failed.append(f"drafter close() failed: {self._failed(closed, named)}")
            if backend is not None:
                reported = Called.of(lambda: bounded_report(backend.report()))
                if reported.value is not None:
                    report = reported.value
                    self.emit(ArmReported(self.arm.name, report))
                else:
                    failed.append(f"report() failed: {self._failed(reported, named)}")
                closed = Called.of(backend.close)
                if not closed.ok:
                    failed.append(f"close() failed: {self._failed(closed, named)}")
        finally:
            for sampler in (self._sampler, self._watcher):
                if sampler is not None:
                    sampler.stop()
        left = self._leftovers.after_arm() if self._leftovers is not None else {}
        if failed:
            left["close_errors"] = failed
        if left:
            self._log(f"arm {self.arm.name}: {Leftovers.line(left)}")
            self.emit(ArmReported(self.arm.name, {**report, "left_behind": left}))
        return Closed(report, left)
