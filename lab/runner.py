"""The runner: arms in order (baselines first), one engine loaded at a time,
warmup unrecorded, then every prompt x round, emitting events to whoever
listens (:mod:`lab.base.events`) and keeping the only list of result rows.

Failures are results: whatever a plugin raises (Ctrl-C and SIGTERM apart) is
its arm's status and the run goes on; every backend is closed on every path."""

from __future__ import annotations

import dataclasses
import itertools
import os
import sys
import threading
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

from lab import arm_process
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
from lab.base import probe as probes
from lab.base.events import (
    ArmReported,
    Cell,
    Event,
    Finished,
    Held,
    Listener,
    Logged,
    MemorySample,
    ReferenceMeasured,
    RunEvent,
    RunFinished,
    RunStarted,
    Status,
    StatusChanged,
    StepEvent,
    TokenEvent,
    arm_cell,
    finished_row,
    now,
)
from lab.base.machine import available_cores
from lab.base.profile import Arm, Profile, RunSettings
from lab.base.row import GPU_KEYS, ResultRow
from lab.probing import driver, isolated
from lab.registry import Registry
from lab.rows.bounds import bounded_report
from lab.rows.build import add_origin, build_result, pick_baseline
from lab.telemetry.contention import Contention, ContentionWatcher, fitting_threads, others_busy_cores
from lab.telemetry.gpu import RunTelemetry
from lab.telemetry.latency import ArrivalClock, LatencyShape
from lab.telemetry.leftovers import Leftovers
from lab.telemetry.memory import MemorySampler

# runs this process has started (RunStarted.runs_before)
_RUNS_STARTED = itertools.count()
# An arm's cells are as bad as their worst status.
_WORST_FIRST = (Status.CRASHED, Status.OOM, Status.ERROR, Status.CANCELLED, Status.SKIPPED)


@dataclass
class RunControl:
    """Thread-safe controls a UI can use while a run is going, and what the
    runner reads of them."""

    _cancel: threading.Event = field(default_factory=threading.Event)
    _skip_arm: threading.Event = field(default_factory=threading.Event)
    _resume: threading.Event = field(default_factory=threading.Event)
    _cancelled_arms: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._resume.set()

    def cancel(self) -> None:
        self._cancel.set()

    def skip_arm(self) -> None:
        """Stop the running arm at its next step; the run goes on."""
        self._skip_arm.set()

    def begin_arm(self) -> None:
        """An arm starts: a skip asked for the one before it is spent."""
        self._skip_arm.clear()

    @property
    def skip_requested(self) -> bool:
        return self._skip_arm.is_set()

    @property
    def stop_requested(self) -> bool:
        """The running arm should stop: the run was cancelled or the arm skipped."""
        return self._cancel.is_set() or self._skip_arm.is_set()

    def cancel_arm(self, arm: str) -> None:
        """Cancel one arm that has not started: the runner records its cells
        as cancelled without loading its engine."""
        with self._lock:
            self._cancelled_arms.add(arm)

    def arm_cancelled(self, arm: str) -> bool:
        with self._lock:
            return arm in self._cancelled_arms

    def stop_status(self, arm: str) -> Status:
        """What the cells of ``arm`` that stop now are recorded as: skipped
        when the user only moved on to the next arm, else cancelled."""
        if self._cancel.is_set() or self.arm_cancelled(arm):
            return Status.CANCELLED
        return Status.SKIPPED

    def pause(self) -> None:
        """Hold the run at its next pause point: the next step of a backend
        that pauses between steps, else the next cell."""
        self._resume.clear()

    def resume(self) -> None:
        self._resume.set()

    @property
    def paused(self) -> bool:
        return not self._resume.is_set()

    def hold(self) -> float:
        """Block while paused (a cancel or a skip ends the hold too);
        returns the seconds held."""
        t0 = now()
        while not self._resume.wait(0.05):
            if self.stop_requested:
                break
        return now() - t0

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()


class RunSink(Protocol):
    """A listener that keeps the run somewhere (lab.store.RunStore): it
    hears every event first, and engines write their own logs beside it."""

    @property
    def path(self) -> Path: ...

    def __call__(self, event: RunEvent) -> None: ...


class Runner:
    def __init__(
        self,
        profile: Profile,
        registry: Registry,
        store: RunSink | None = None,
        listeners: Sequence[Listener] = (),
        control: RunControl | None = None,
    ) -> None:
        """``store`` is subscribed ahead of ``listeners``, so a row is saved
        before anyone else hears that its cell finished."""
        self.profile = profile
        self.registry = registry
        self._store = store
        self.listeners: list[Listener] = ([store] if store is not None else []) + list(listeners)
        self.control = control or RunControl()
        self._rows: list[ResultRow] = []
        self._rows_lock = threading.Lock()
        # (arm, prompt, round) -> output ids of baseline arms, for the oracle
        self.reference_ids: dict[tuple[str, str, int], list[int]] = {}
        self._emit_lock = threading.RLock()
        # GPU telemetry over the run (lab.telemetry.gpu), None without a GPU; when the
        # last cell's generation returned, the end of its energy window.
        self.gpu: RunTelemetry | None = None
        self._gen_end: float | None = None
        self._categories = {p.name: p.category for p in profile.prompts}
        # processes besides this one whose CPU is the lab's own (the run's, for an arm in a child)
        self._lab_pids: list[int] = []
        self._fork_preload = self._preload()

    @property
    def run_dir(self) -> str:
        """Where the run is saved now: the store moves it to a fallback
        directory when its own stops taking writes, and later arms' logs
        follow it."""
        return str(self._store.path) if self._store is not None else ""

    # -- events -------------------------------------------------------------
    def emit(self, event: RunEvent) -> None:
        """Hand ``event`` to every listener in subscription order, from any thread:
        one re-entrant lock around the dispatch, so each event reaches every
        listener before the next starts and no listener runs on two threads at once."""
        with self._emit_lock:
            for listener in self.listeners:
                try:
                    listener(event)
                except Exception:  # noqa: BLE001 - a broken listener must not stop a run
                    traceback.print_exc()

    def _log(self, text: str) -> None:
        self.emit(Logged(text))

    # -- rows -----------------------------------------------------------------
    def rows(self) -> tuple[ResultRow, ...]:
        """The rows recorded so far, in the order their cells finished (any
        thread may ask while the run goes)."""
        with self._rows_lock:
            return tuple(self._rows)

    def _has_row(self, cell: Cell) -> bool:
        return any(r.cell == cell for r in self.rows())

    # -- run ------------------------------------------------------------------
    def run(self) -> list[ResultRow]:
        threads = self._fit_threads()
        self.emit(
            RunStarted(
                self.profile.name, self.run_dir, tuple(a.name for a in self.profile.arms),
                tuple(p.name for p in self.profile.prompts), self.profile.run.rounds,
                runs_before=next(_RUNS_STARTED), threads=threads,
            )
        )
        interrupted = False
        self.gpu = RunTelemetry.open(self.emit)
        try:
            # Before any arm: the probe's passes must never overlap a timed cell.
            self._probe_phase()
            for arm in self.profile.ordered_arms():
                if self.control.cancelled:
                    self._fill(arm, Status.CANCELLED, "run cancelled before this arm started")
                    continue
                if self.control.arm_cancelled(arm.name):
                    self._fill(arm, Status.CANCELLED, "arm cancelled before it started")
                    continue
                self.control.begin_arm()
                self._run_arm(arm)
        except KeyboardInterrupt:
            interrupted = True
            self.control.cancel()
            for arm in self.profile.arms:
                self._fill(arm, Status.CANCELLED, "interrupted")
            raise
        finally:
            self._close_gpu()
            self.emit(RunFinished(self.run_dir, cancelled=self.control.cancelled or interrupted))
        return list(self.rows())

    def _fit_threads(self) -> dict[str, Any] | None:
        """``[run] threads = 0``: threads that fit the machine, every core unless
        other processes keep some busy as the run starts (oversubscribed engine
        threads collapse); the run says which count it took."""
        run = self.profile.run
        if run.threads:
            return None
        cores = available_cores()
        others = others_busy_cores()
        used = fitting_threads(cores, others)
        if used < cores:
            self.profile = dataclasses.replace(self.profile, run=dataclasses.replace(run, threads=used))
        return {"asked": 0, "cores": cores, "others_cores": round(others, 2), "used": used}

    def _probe_phase(self) -> None:
        """Measure (or find cached) T(w) and the bandwidth of every stack
        that speculates (``[run] probe = false``: off); a failed probe costs
        the prediction, never the run."""
        setting = self.profile.run.probe
        if setting is False:
            self.emit(probes.ProbeReported("", "off ([run] probe = false)"))
            return
        got: list[probes.Probe] = []
        if isinstance(setting, str):
            path = Path(setting)
            if not path.is_absolute():
                path = Path(self.profile.path).parent / path
            try:
                p = probes.load(path)
            except probes.ProbeError as exc:
                self.emit(probes.ProbeReported("", f"{exc}; no prediction"))
                return
            # arms it priced in another run say nothing here: rows match it by backend and model
            kept = {k: v for k, v in p.origin.items() if k != "arms"}
            p = dataclasses.replace(p, origin={**kept, "source": "file", "path": setting})
            self.emit(probes.ProbeReported(f"{p.backend} / {p.model}", p.origin_line(), probe=p))
            got.append(p)
        else:
            specs, skipped = driver.plan(self.profile.arms, self.profile.run.threads, self.registry,
                                         self.profile.run.probe_depth, self.profile.run.request_lengths())
            for line in skipped:
                self.emit(probes.ProbeReported("", line))
            for spec in specs:
                if self.control.cancelled:
                    break
                self.emit(probes.ProbeReported(
                    spec.label, f"verify cost T(w) for widths {probes.format_widths(spec.widths)}", done=False))
                try:
                    found = isolated.obtain_isolated(spec, self.registry, cancelled=lambda: self.control.cancelled,
                                                     log=self._log)
                    if found is None:  # cancelled while it measured: its process is stopped
                        break
                    # which rows it prices: the report matches rows to probes by this
                    p = dataclasses.replace(found, origin={**found.origin, "arms": list(spec.arms)})
                except KeyboardInterrupt:
                    raise
                except Exception as exc:  # noqa: BLE001 - no probe means no prediction, not a failed run
                    self._log(traceback.format_exc())
                    self.emit(probes.ProbeReported(
                        spec.label, f"failed ({type(exc).__name__}: {exc}); no prediction for this stack"))
                    continue
                self.emit(probes.ProbeReported(spec.label, p.origin_line(), probe=p))
                got.append(p)
        if got and self.run_dir:
            probes.save_for_run(self.run_dir, got)

    def _hold(self, cell: Cell, in_cell: bool) -> float:
        """Wait here while the run is paused; returns the seconds held."""
        if not self.control.paused or self.control.stop_requested:
            return 0.0
        self.emit(Held(cell, None, in_cell))
        seconds = self.control.hold()
        self.emit(Held(cell, seconds, in_cell))
        return seconds

    def _cells(self, arm: Arm) -> list[Cell]:
        # an arm whose acceptance was set for one prompt runs that prompt only
        only = arm.acceptance.prompt if arm.acceptance is not None else None
        return [
            Cell(arm.name, p.name, r)
            for p in self.profile.prompts
            if only is None or p.name == only
            for r in range(1, self.profile.run.rounds + 1)
        ]

    def _fill(self, arm: Arm, status: Status, detail: str) -> None:
        """Give every cell of an arm that has no row yet a failure row."""
        for cell in self._cells(arm):
            if not self._has_row(cell):
                self._record(arm, cell, status, detail=detail)
        self.emit(StatusChanged(arm_cell(arm.name), status, detail=detail))

    def _record(self, arm: Arm, cell: Cell, status: Status, gen: Generation | None = None,
                steps: Sequence[StepEvent] = (), detail: str = "", peak: int | None = None,
                origin: Sequence[Sequence[int]] | None = None, latency: LatencyShape | None = None,
                contention: Contention | None = None) -> ResultRow:
        baseline = pick_baseline(self.rows(), arm.baseline, cell.prompt, cell.round) if arm.baseline else None
        warm = self.profile.run.warm_rounds
        # warm rounds after the first are held to the arm's own cold first round
        cold_first = self._own_round(arm, cell.prompt, 1) if warm and cell.round > 1 else None
        row = build_result(
            arm=arm, prompt=cell.prompt, round=cell.round, status=status, steps=steps,
            n_tokens=len(gen.ids) if gen else None, gen_s=gen.gen_s if gen else None,
            prompt_tokens=gen.prompt_tokens if gen else None, prompt_s=gen.prompt_s if gen else None,
            text=gen.text if gen else None, baseline=baseline, peak_mem_bytes=peak,
            engine_bytes=gen.engine_bytes if gen else None, detail=detail,
            engine_report=gen.engine_report if gen else None, text_origin=origin,
            gpu_keys=self._gpu_keys(arm, cell, gen.gen_s if gen else None, len(gen.ids) if gen else None, steps,
                                    self._gen_end),
            category=self._categories.get(cell.prompt),
            latency=latency.to_json() if latency is not None else None, contention=contention,
            warm=warm, cold_first=cold_first,
            max_tokens=self._max_tokens(cell), overshoot=self._overshoot(arm),
            ignore_eos=self.profile.run.ignore_eos,
        )
        with self._rows_lock:
            self._rows.append(row)
        # Finished.result is typed as the saved form in lab.base.events; the row
        # reads as that form (ResultRow is a Mapping of it).
        self.emit(Finished(cell, row))
        return row

    def _own_round(self, arm: Arm, prompt: str, round: int) -> ResultRow | None:
        return next((r for r in self.rows() if r.arm == arm.name and r.prompt == prompt and r.round == round), None)

    def _max_tokens(self, cell: Cell) -> int:
        """What the cell's request asked for (as :meth:`_request` sets it)."""
        run = self.profile.run
        return min(run.max_tokens, run.warmup_tokens) if cell.is_warmup and run.warmup_tokens else run.max_tokens

    def _overshoot(self, arm: Arm) -> int:
        try:
            return int(self.registry.backend(arm.backend).max_overshoot_tokens)
        except Exception:  # noqa: BLE001 - an arm whose backend is gone records its failure row all the same
            return 0

    def _record_stopped(self, arm: Arm, cell: Cell, peak: int | None) -> None:
        status = self.control.stop_status(arm.name)
        detail = "skipped: the run moved on to the next arm" if status == Status.SKIPPED else "cancelled"
        self._record(arm, cell, status, detail=detail, peak=peak)

    def _gpu_keys(self, arm: Arm, cell: Cell, gen_s: float | None, n_tokens: int | None,
                  steps: Sequence[StepEvent], gen_end: float | None) -> dict[str, object] | None:
        if self.gpu is None:
            return None
        if gen_s is None or gen_end is None:
            return self.gpu.cell_keys(arm.name, cell.prompt, cell.round)
        return self.gpu.cell_keys(arm.name, cell.prompt, cell.round, gen_end, gen_s, n_tokens, steps)

    def _close_gpu(self) -> None:
        """Stop sampling; gpu.json and the raw readings go beside the run."""
        if self.gpu is None:
            return
        try:
            self.gpu.stop()
            if self.run_dir:
                self.gpu.write(self.run_dir)
        except Exception:  # noqa: BLE001 - telemetry must never cost a run its results
            self._log(traceback.format_exc())

    def _reference(self, arm: Arm) -> Callable[[str, int], Sequence[int] | None]:
        def lookup(prompt: str, round: int) -> Sequence[int] | None:
            if arm.baseline is None:
                return None
            # Warmup (round 0) replays round 1's reference when it exists.
            for r in (round, 1, 0):
                ids = self.reference_ids.get((arm.baseline, prompt, r))
                if ids is not None:
                    return ids
            return None

        return lookup

    def _request(self, cell: Cell, arm: Arm) -> GenerationRequest:
        run = self.profile.run
        prompt = next(p for p in self.profile.prompts if p.name == cell.prompt)
        max_tokens = self._max_tokens(cell)
        return GenerationRequest(
            cell=cell, prompt=prompt.text, system=prompt.system, chat_template=run.chat_template,
            max_tokens=max_tokens, temperature=run.temperature, seed=run.seed,
            ignore_eos=run.ignore_eos, n_max=arm.n_max, acceptance=arm.set_rates, draft_policy=arm.draft_policy,
        )

    def _run_arm(self, arm: Arm) -> None:
        if arm_process.wants_own_process(arm, self.registry):
            self._run_arm_apart(arm)
        else:
            self.run_arm_here(arm)

    def restore(self, rows: Sequence[ResultRow], reference_ids: Mapping[tuple[str, str, int], list[int]],
                lab_pids: Sequence[int]) -> None:
        """An arm's child process (lab.arm_process) starts where the run is."""
        with self._rows_lock:
            self._rows = list(rows)
        self.reference_ids = dict(reference_ids)
        self._lab_pids = list(lab_pids)

    def _preload(self) -> tuple[str, ...]:
        found = (self.registry.backends.get(a.backend) for a in self.profile.arms)
        return tuple(dict.fromkeys(m for cls in found if cls is not None and cls.engine_in_process
                                   for m in cls.fork_preload))

    def _controls(self, arm: Arm) -> arm_process.Controls:
        c = self.control
        return c.cancelled, c.skip_requested, c.paused, c.arm_cancelled(arm.name)

    def _run_arm_apart(self, arm: Arm) -> None:
        """The arm in a child process: its rows as the child records them
        and, if the child dies first, its cells left as crashed."""
        try:
            child = arm_process.start(arm_process.ArmRequest(
                self.profile, arm.name, self.run_dir, self.rows(), dict(self.reference_ids), self._controls(arm),
                os.getpid()), self._fork_preload, self._log)
        except Exception:  # noqa: BLE001 - no process of its own: the arm runs here, as before
            self._log(f"arm {arm.name}: no process of its own, run in the lab's\n{traceback.format_exc()}")
            self.run_arm_here(arm)
            return
        if self.gpu is not None:
            self.gpu.begin_arm(arm.name, child.pids)
        steps: list[StepEvent] = []
        done = False
        try:
            for message in child.messages(lambda: self._controls(arm)):
                if message.reference_ids is not None:
                    self.reference_ids.update(message.reference_ids)
                    done = True
                elif message.event is not None:
                    self._adopt(arm, message.event, message.gen_end, steps, child.pid)
        finally:
            child.stop()
        if child.output.strip():
            self._log(f"arm {arm.name} in its own process (pid {child.pid}):\n{child.output}")
        if not done:
            self._fill(arm, Status.CRASHED, child.death())

    def _adopt(self, arm: Arm, event: RunEvent, gen_end: float | None, steps: list[StepEvent], pid: int) -> None:
        """An event from the arm's child, as this runner would have emitted it:
        rows kept, GPU figures (sampled here) added."""
        if isinstance(event, StepEvent):
            steps.append(event)
        elif isinstance(event, MemorySample) and self.gpu is not None:
            event = dataclasses.replace(event, device_bytes=self.gpu.device_bytes(arm.name))
        elif isinstance(event, ArmReported):
            event = dataclasses.replace(event, report={**event.report, "process": f"own (pid {pid})"})
        elif isinstance(event, Finished):
            row = finished_row(event)
            cell_steps = [s for s in steps if s.cell == event.cell]
            steps.clear()
            if self.gpu is not None:
                ok = row.status == Status.OK
                keys = self._gpu_keys(arm, event.cell, row.gen_s if ok else None, row.n_tokens, cell_steps, gen_end)
                gpu: dict[str, Any] = {k: (keys or {}).get(k) for k in GPU_KEYS}
                row = dataclasses.replace(row, **gpu)
                event = Finished(event.cell, row, event.t)
            with self._rows_lock:
                self._rows.append(row)
        self.emit(event)

    def run_arm_here(self, arm: Arm) -> None:
        """The arm in this process: load, cells, close, on every path."""
        cell0 = arm_cell(arm.name)
        ctx = BackendContext(self.profile.run, self.run_dir, self._log)
        backend: Backend | None = None
        drafter: Drafter | None = None
        engine_bytes: list[int | None] = [None]
        reference_after_close = False
        leftovers = Leftovers.before_arm()
        try:
            try:
                backend = self.registry.backend(arm.backend)(arm, ctx)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # noqa: BLE001 - a plugin's constructor is a plugin call too
                self._log(traceback.format_exc())
                self._fill(arm, Status.ERROR, f"load failed: {_named(exc)}")
                return
            telemetry = self.gpu
            if telemetry is not None:
                telemetry.begin_arm(arm.name, backend.child_pids)
            sampler = MemorySampler(
                arm.name, self.emit, self.profile.run.memory_interval_s,
                child_pids=backend.child_pids, engine_bytes=lambda: engine_bytes[0],
                device_bytes=(lambda: telemetry.device_bytes(arm.name)) if telemetry is not None else lambda: None,
            )
            # the noise guard: other processes' CPU use while this arm's cells run
            watcher = ContentionWatcher(
                arm.name, type(backend).busy_cores(arm.options, self.profile.run.threads), self._engine_pids(backend))
            with sampler, watcher:
                self.emit(StatusChanged(cell0, Status.LOADING, phase="loading"))
                try:
                    backend.load(self.emit)
                    if arm.drafter is not None:
                        if not isinstance(backend, Drafting):
                            raise TypeError(f"backend {arm.backend} does not run drafter plugins")
                        self.emit(StatusChanged(cell0, Status.LOADING, phase=f"loading drafter {arm.drafter}"))
                        drafter = attach_drafter(self.registry.drafter(arm.drafter), arm, backend, self.profile.run,
                                                 self._reference(arm), self._log)
                    engine_bytes[0] = backend.engine_bytes()
                except EngineFailure as exc:
                    self._fill(arm, exc.status, _detail(exc))
                    return
                except KeyboardInterrupt:
                    raise
                except BaseException as exc:  # noqa: BLE001 - a broken arm (SystemExit too) is a result
                    self._log(traceback.format_exc())
                    self._fill(arm, Status.ERROR, f"load failed: {_named(exc)}")
                    return
                self._run_cells(arm, backend, sampler, watcher, drafter)
                reference_after_close = self._reference_with_engine(arm, backend)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - any plugin call around the cells (pids, cores) too
            self._log(traceback.format_exc())
            self._fill(arm, Status.ERROR, f"arm failed: {_named(exc)}")
        finally:
            failed: list[str] = []
            if drafter is not None:
                try:
                    drafter.close()
                except KeyboardInterrupt:
                    raise
                except BaseException as exc:  # noqa: BLE001 - a plugin's close must not end the run
                    self._log(traceback.format_exc())
                    failed.append(f"drafter close() failed: {_named(exc)}")
            report: dict[str, Any] = {}
            if backend is not None:
                try:
                    report = bounded_report(backend.report())
                    self.emit(ArmReported(arm.name, report))
                except KeyboardInterrupt:
                    raise
                except BaseException as exc:  # noqa: BLE001
                    self._log(traceback.format_exc())
                    failed.append(f"report() failed: {_named(exc)}")
                try:
                    backend.close()
                except KeyboardInterrupt:
                    raise
                except BaseException as exc:  # noqa: BLE001
                    self._log(traceback.format_exc())
                    failed.append(f"close() failed: {_named(exc)}")
            left = leftovers.after_arm()
            if failed:
                left["close_errors"] = failed
            if left:
                self._log(f"arm {arm.name}: {Leftovers.line(left)}")
                self.emit(ArmReported(arm.name, {**report, "left_behind": left}))
        if reference_after_close and backend is not None:
            self._measure_reference(arm, backend)

    def _engine_pids(self, backend: Backend) -> Callable[[], list[int]]:
        """The arm's processes for the noise guard: the engine's, and the run's own process."""
        return lambda: [*backend.engine_pids(), *self._lab_pids]

    # -- the engine's own figure for a baseline ([run] reference) ---------------
    def _reference_with_engine(self, arm: Arm, backend: Backend) -> bool:
        """Measure the arm's reference now, while its engine is loaded, if
        it needs that; True when it is to be measured once the engine has
        closed instead (a tool that loads the model itself)."""
        # a run cancelled or an arm skipped wants no more of it
        if not (self.profile.run.reference and arm.is_baseline) or self.control.stop_requested:
            return False
        if not type(backend).reference_tool(arm.options):
            return False
        if isinstance(backend, Referencing) and not backend.reference_needs_load():
            return True
        self._measure_reference(arm, backend)
        return False

    def _measure_reference(self, arm: Arm, backend: Backend) -> None:
        """Time the baseline's plain decoding with the engine's own tool after the
        arm's cells, on the first prompt with a row at that row's depth; a failure
        is recorded in its place."""
        tool = type(backend).reference_tool(arm.options) or "?"
        rows = [r for r in self.rows() if r.arm == arm.name and r.status == Status.OK and r.round >= 1]
        order = [p.name for p in self.profile.prompts]
        rows.sort(key=lambda r: (order.index(r.prompt) if r.prompt in order else len(order), r.round))
        record: dict[str, object] = {"tool": tool}
        if not rows:
            record["error"] = "not measured: the arm has no row to compare it with"
        elif not isinstance(backend, Referencing):
            record["error"] = f"not measured: backend {arm.backend} names {tool} but has no Referencing capability"
        else:
            first = rows[0]
            record["prompt"] = first.prompt
            self.emit(ReferenceMeasured(arm.name, dict(record), done=False))
            start = now()
            # the noise guard, as over a cell: a reference taken on a busy machine says so
            watcher = ContentionWatcher(f"{arm.name}-reference",
                                        type(backend).busy_cores(arm.options, self.profile.run.threads),
                                        self._engine_pids(backend))
            try:
                with watcher:
                    mark = watcher.mark()
                    got = backend.measure_reference(self._request(Cell(arm.name, first.prompt, 1), arm),
                                                    first.prompt_tokens)
                    busy = watcher.reading(mark)
                record.update(got)
                record["contention"] = round(busy.others_cores, 3)
                record["contended"] = busy.contended
                if busy.contended:
                    record["contention_note"] = busy.note()
                record["when"] = ("after the arm's cells, its engine still loaded" if backend.reference_needs_load()
                                  else "after the arm's cells, its engine closed")
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # noqa: BLE001 - a reference that fails costs its line, never the run
                self._log(traceback.format_exc())
                record["error"] = _named(exc)
            record["seconds"] = round(now() - start, 3)
        self.emit(ReferenceMeasured(arm.name, record))

    def _reset_round(self, arm: Arm, cell: Cell, backend: Backend, drafter: Drafter | None) -> float:
        """Bring the engine (and a drafter that keeps state) back to the
        state the arm's first cell met, before the cell's clock starts:
        the seconds it took, kept out of every measurement."""
        start = now()
        if type(backend).round_state(arm.options) != "none":
            self.emit(StatusChanged(cell, Status.LOADING, phase="resetting engine state between rounds"))
            backend.reset_round(self.emit)
        if drafter is not None and type(drafter).keeps_state:
            drafter.forget()
        return now() - start

    def _run_cells(self, arm: Arm, backend: Backend, sampler: MemorySampler,
                   watcher: ContentionWatcher | None = None, drafter: Drafter | None = None) -> None:
        cell0 = arm_cell(arm.name)
        run = self.profile.run
        warm_cells = [Cell(arm.name, self.profile.prompts[0].name, 0)] * run.warmup
        crashed: str | None = None
        # whether the engine has generated since it loaded (or was last reset)
        used = False
        for cell in [*warm_cells, *self._cells(arm)]:
            if crashed is not None:
                if not cell.is_warmup:
                    self._record(arm, cell, Status.CRASHED, detail=crashed, peak=sampler.peak)
                continue
            self._hold(cell, in_cell=False)
            if self.control.stop_requested:
                if not cell.is_warmup:
                    self._record_stopped(arm, cell, sampler.peak)
                continue
            status = Status.WARMUP if cell.is_warmup else Status.RUNNING
            self.emit(StatusChanged(cell, status, phase="warming up" if cell.is_warmup else "running"))
            steps: list[StepEvent] = []
            held = [0.0]
            pausable = backend.pauses_between_steps()
            origin: list[list[int]] = []
            clock = ArrivalClock(now())

            def collect(event: Event, steps: list[StepEvent] = steps, origin: list[list[int]] = origin,
                        clock: ArrivalClock = clock) -> None:
                if isinstance(event, StepEvent):
                    steps.append(event)
                elif isinstance(event, TokenEvent):
                    add_origin(origin, len(event.text), event.from_draft)
                    clock.token(event.t, len(event.ids))
                self.emit(event)

            def cancelled(cell: Cell = cell, held: list[float] = held, pausable: bool = pausable,
                          clock: ArrivalClock = clock) -> bool:
                if pausable:
                    seconds = self._hold(cell, in_cell=True)
                    held[0] += seconds
                    clock.held(seconds)
                return self.control.stop_requested

            reset_s: float | None = None
            try:
                # warm rounds still start cold: round 1 meets the engine as
                # loaded, warmup or not, and the later rounds are held to it
                if used and not cell.is_warmup and (not run.warm_rounds or cell.round == 1):
                    reset_s = self._reset_round(arm, cell, backend, drafter)
                    used = False
                    self.emit(StatusChanged(cell, status, phase="running"))
                used = True
                mark = watcher.mark() if watcher is not None else None
                # the request goes in now: the time to first token counts from here
                clock.start = now()
                self._gen_end = None
                gen = backend.generate(self._request(cell, arm), collect, cancelled)
                self._gen_end = now()
                if not isinstance(gen, Generation):
                    raise TypeError(f"backend {arm.backend}: generate() returned {type(gen).__name__}, not a Generation")
                busy = watcher.reading(mark) if watcher is not None and mark is not None else None
            except Cancelled:
                if not cell.is_warmup:
                    self._record_stopped(arm, cell, sampler.peak)
                continue
            except EngineFailure as exc:
                if not cell.is_warmup:
                    self._record(arm, cell, exc.status, detail=_detail(exc), peak=sampler.peak)
                if exc.status == Status.CRASHED:
                    crashed = f"engine crashed earlier in this arm: {exc}"
                continue
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # noqa: BLE001 - SystemExit from a plugin is its arm's error too
                self._log(traceback.format_exc())
                if not cell.is_warmup:
                    self._record(arm, cell, Status.ERROR, detail=_named(exc), peak=sampler.peak)
                continue
            sampler.sample()
            if reset_s is not None:
                gen = dataclasses.replace(gen, engine_report={**gen.engine_report, "round_reset_s": round(reset_s, 3)})
            if held[0]:
                # Held between steps: no step was timed across the pause,
                # only the cell's generation clock ran on.
                gen = dataclasses.replace(
                    gen, gen_s=gen.gen_s - held[0], engine_report={**gen.engine_report, "paused_s": held[0]})
            if arm.is_baseline:
                self.reference_ids[(arm.name, cell.prompt, cell.round)] = list(gen.ids)
            if not cell.is_warmup:
                self._record(arm, cell, Status.OK, gen, steps, peak=sampler.peak, origin=origin,
                             latency=clock.shape(), contention=busy)
        final = {r.status for r in self.rows() if r.arm == arm.name}
        worst = next((s for s in _WORST_FIRST if s in final), Status.OK)
        self.emit(StatusChanged(cell0, worst))


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


def _named(exc: BaseException) -> str:
    """A plugin's failure in a row's words: SystemExit says it was an exit."""
    if isinstance(exc, SystemExit):
        return f"SystemExit: a plugin called exit({exc.code!r}); the lab went on"
    return f"{type(exc).__name__}: {exc}"


def _detail(exc: EngineFailure) -> str:
    text = str(exc)
    if exc.log_excerpt:
        text += "\n--- engine log ---\n" + exc.log_excerpt
    return text


if __name__ == "__main__":
    sys.exit(arm_process.child_main(sys.argv[1:], Runner, RunControl))
