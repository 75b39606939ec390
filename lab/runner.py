"""The runner: it orders a run and keeps its rows.

The probe phase first (:mod:`lab.probing.phase`), then every measured cell in
the order :mod:`lab.arms.order` gives (paired by default: each arm's cell
beside its baseline's), each arm's engine loaded before its first cell with
its warmup unrecorded, kept loaded between its cells where the group fits
(:mod:`lab.arms.fit`), and closed after its last. An arm runs in a process of
its own (:class:`lab.arms.handles.RemoteArm`) wherever a fresh interpreter
finds its plugins, so a native crash or a hung plugin call costs that arm's
cells, never the run. The runner emits every event to whoever listens
(:mod:`lab.base.events`) and builds every row from what the cell returned.

Failures are results: whatever a plugin does (Ctrl-C and SIGTERM apart) is
its arm's status and the run goes on; every arm is closed on every path."""

from __future__ import annotations

import dataclasses
import itertools
import threading
import traceback
from typing import Any, Callable, Sequence

from lab.arms import fit, order
from lab.arms.control import RunControl, RunSink
from lab.arms.handles import Handle, start_arm
from lab.arms.life import CellOutcome, hold, max_tokens
from lab.base.events import (
    ArmReported,
    Cell,
    Finished,
    Listener,
    Logged,
    MemorySample,
    OrderPlanned,
    RoundAdded,
    RunEvent,
    RunFinished,
    RunStarted,
    Status,
    StatusChanged,
    StepEvent,
    arm_cell,
    now,
)
from lab.base.machine import available_cores
from lab.base.profile import Arm, Profile
from lab.base.row import ResultRow
from lab.probing.phase import probe_phase
from lab.registry import Registry
from lab.rows.build import build_result, pick_baseline
from lab.telemetry.contention import fitting_threads, others_busy_cores
from lab.telemetry.gpu import RunTelemetry

# runs this process has started (RunStarted.runs_before)
_RUNS_STARTED = itertools.count()
# An arm's cells are as bad as their worst status.
_WORST_FIRST = (Status.CRASHED, Status.OOM, Status.ERROR, Status.CANCELLED, Status.SKIPPED)

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
        # GPU telemetry over the run (lab.telemetry.gpu), None without a GPU
        self.gpu: RunTelemetry | None = None
        self._categories = {p.name: p.category for p in profile.prompts}
        self._handles: dict[str, Handle] = {}
        # arms that run no more cells: the status and detail their cells get
        self._dead: dict[str, tuple[Status, str]] = {}
        self._steps: dict[Cell, list[StepEvent]] = {}
        # arms whose engine began to load at least once
        self._started: set[str] = set()
        # each arm's report as last heard (ArmReported)
        self._reports: dict[str, Any] = {}
        # arms whose last cell has run and whose final status was said
        self._final: set[str] = set()

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

    def _arm_emit(self, arm: Arm, process: Callable[[], str]) -> Callable[[RunEvent], None]:
        """An arm's events as the run hears them: steps kept for the cell's
        row, GPU memory (read here) added to memory samples."""
        def emit(event: RunEvent) -> None:
            if isinstance(event, StepEvent):
                if not event.cell.is_warmup:
                    self._steps.setdefault(event.cell, []).append(event)
            elif isinstance(event, MemorySample) and self.gpu is not None:
                event = dataclasses.replace(event, device_bytes=self.gpu.device_bytes(arm.name))
            elif isinstance(event, ArmReported):
                if process() != "shared":
                    event = dataclasses.replace(event, report={**event.report, "process": process()})
                self._reports[arm.name] = event.report
            self.emit(event)

        return emit

    # -- rows -----------------------------------------------------------------
    def rows(self) -> tuple[ResultRow, ...]:
        """The rows recorded so far, in the order their cells finished (any
        thread may ask while the run goes)."""
        with self._rows_lock:
            return tuple(self._rows)

    def _has_row(self, cell: Cell) -> bool:
        return any(r.cell == cell for r in self.rows())

    def _cells(self, arm: Arm) -> list[Cell]:
        return order.arm_cells(self.profile, arm)

    # -- run ------------------------------------------------------------------
    def run(self) -> list[ResultRow]:
        threads = self._fit_threads()
        self.emit(RunStarted(
            self.profile.name, self.run_dir, tuple(a.name for a in self.profile.arms),
            tuple(p.name for p in self.profile.prompts), self.profile.run.rounds,
            runs_before=next(_RUNS_STARTED), threads=threads,
        ))
        interrupted = False
        self.gpu = RunTelemetry.open(self.emit)
        try:
            # before any arm: the probe's passes must never overlap a timed cell
            probe_phase(self.profile, self.registry, self.emit, lambda: self.control.cancelled, self.run_dir)
            self._run_slots()
        except KeyboardInterrupt:
            interrupted = True
            self.control.cancel()
            raise
        finally:
            self._end_all()
            for arm in self.profile.arms:
                why = ("interrupted" if interrupted else "run cancelled before this cell ran" if arm.name in self._started
                       else "run cancelled before this arm started")
                self._fill(arm, Status.CANCELLED, why)
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

    def _plan(self) -> tuple[list[order.Slot], frozenset[str]]:
        """The cells in order and the arms that stay loaded between theirs."""
        slots = order.plan(self.profile)
        resident: set[str] = set()
        said = []
        for group in order.groups(self.profile):
            kept = fit.residency(group, self.profile, self.registry)
            resident |= kept.resident
            said.append({"arms": [a.name for a in group], "resident": sorted(kept.resident), "note": kept.note})
        self.emit(OrderPlanned(self.profile.run.order, order.describe(self.profile), tuple(said)))
        return slots, frozenset(resident)

    def _run_slots(self) -> None:
        slots, resident = self._plan()
        if self.profile.run.order == "arms":
            # each engine closes after its arm's last cell: one loaded at a time
            self._play(slots, resident, close_at_last=True)
            return
        # paired: one group (arms that share a baseline) at a time, its engines held for its added rounds
        for group in order.groups(self.profile):
            names = {a.name for a in group}
            t0 = now()
            self._play([s for s in slots if s.arm.name in names], resident, close_at_last=False)
            planned_s = now() - t0
            for extra_round in range(self.profile.run.rounds + 1, order.max_rounds(self.profile.run) + 1):
                if self.control.cancelled or now() - t0 - planned_s > planned_s * order.EXTRA_SHARE:
                    break
                extra, why = order.extra_slots(self.profile, self.rows(), extra_round, group)
                if not extra:
                    break
                self.emit(RoundAdded(extra_round, tuple(sorted({s.cell.prompt for s in extra})), why))
                self._play(extra, resident, close_at_last=False)
            for arm in group:
                self._close(arm, final=True)

    def _play(self, slots: Sequence[order.Slot], resident: frozenset[str], close_at_last: bool) -> None:
        last = {s.arm.name: i for i, s in enumerate(slots)}
        for i, slot in enumerate(slots):
            arm, cell = slot.arm, slot.cell
            if self.control.cancelled:
                return
            if arm.name in self._dead or self._has_row(cell):
                self._record_dead(arm, cell)
            elif self.control.arm_cancelled(arm.name):
                self._drop(arm, Status.CANCELLED, "arm cancelled before it started")
            else:
                self._run_cell(arm, cell)
            if arm.name in self._dead or (close_at_last and i == last[arm.name]):
                self._close(arm, final=True)
            elif arm.name not in resident:
                self._close(arm, final=False)

    def _run_cell(self, arm: Arm, cell: Cell) -> None:
        handle = self._handles.get(arm.name) or self._open(arm)
        if handle is None:
            self._record_dead(arm, cell)
            return
        # a pause asked while the engine loaded holds here, before the cell
        self._hold(cell, in_cell=False)
        if self.control.cancelled:
            return
        if self.gpu is not None:
            self.gpu.arm = arm.name
        self._keep(arm, cell, handle.cell(cell, self._references(arm, cell)))

    def _keep(self, arm: Arm, cell: Cell, got: CellOutcome) -> None:
        """One cell's outcome: its row (a measured cell), the baseline's ids,
        and what it means for the arm's later cells."""
        steps = self._steps.pop(cell, [])
        if got.status == Status.OK and got.gen is not None and arm.is_baseline:
            self.reference_ids[(arm.name, cell.prompt, cell.round)] = list(got.gen.ids)
        stopped = got.status == Status.CANCELLED and not got.ended
        if stopped:
            status = self.control.stop_status(arm.name)
            detail = "skipped: the run moved on to the next arm" if status == Status.SKIPPED else "cancelled"
            got = dataclasses.replace(got, status=status, detail=detail)
        if not cell.is_warmup:
            self._record(arm, got, steps)
        if got.crashed or got.ended:
            earlier = "engine crashed earlier in this arm" if got.crashed else "not run: the arm's process was ended"
            self._dead[arm.name] = (got.status, f"{earlier}: {got.detail}")
        elif stopped and not self.control.cancelled:
            self._dead[arm.name] = (got.status, got.detail)
            self.control.begin_arm()

    def _references(self, arm: Arm, cell: Cell) -> dict[tuple[str, str, int], list[int]]:
        if arm.baseline is None:
            return {}
        keys = [(arm.baseline, cell.prompt, r) for r in (cell.round, 1, 0)]
        return {k: self.reference_ids[k] for k in keys if k in self.reference_ids}

    def _hold(self, cell: Cell, in_cell: bool) -> float:
        return hold(self.control, self.emit, cell, in_cell)

    # -- an arm's engine ------------------------------------------------------------
    def _open(self, arm: Arm) -> Handle | None:
        """The arm's engine loaded (in its own process where it can be) and
        warmed up; None, its cells failed, when it could not be."""
        self.control.begin_arm()
        self._started.add(arm.name)
        handle: Handle | None = None
        try:
            handle = self._start(arm)
            self._handles[arm.name] = handle
            if self.gpu is not None:
                self.gpu.begin_arm(arm.name, handle.pids)
            opened = handle.open()
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # noqa: BLE001 - an arm that cannot start fails, the run goes on
            self._log(traceback.format_exc())
            opened = None
            why = f"the arm could not start: {type(exc).__name__}: {exc}"
        if opened is None or not opened.ok:
            status, detail = (opened.status, opened.detail) if opened is not None else (Status.ERROR, why)
            self._drop(arm, status, detail)
            self._close(arm, final=True)
            return None
        assert handle is not None
        first = self.profile.prompts[0].name
        for _ in range(self.profile.run.warmup):
            if self.control.stop_requested or arm.name in self._dead:
                break
            self._keep(arm, Cell(arm.name, first, 0), handle.cell(Cell(arm.name, first, 0),
                                                                  self._references(arm, Cell(arm.name, first, 0))))
        if arm.name in self._dead:
            self._fill(arm, *self._dead[arm.name])
            self._close(arm, final=True)
            return None
        return handle

    def _start(self, arm: Arm) -> Handle:
        process = {"label": "shared"}
        handle = start_arm(self.profile, arm, self.registry, self.run_dir,
                           self._arm_emit(arm, lambda: process["label"]), self.control)
        process["label"] = handle.process
        return handle

    def _close(self, arm: Arm, final: bool) -> None:
        """The arm's engine closed and its process ended. After its last cell
        its final status is said first (its lanes stay finished), then its
        reference measured before close (or after, for a tool that loads the
        model itself)."""
        if arm.name in self._final:
            return
        if final:
            self._final.add(arm.name)
            got = {r.status for r in self.rows() if r.arm == arm.name}
            self.emit(StatusChanged(arm_cell(arm.name), next((s for s in _WORST_FIRST if s in got), Status.OK)))
        handle = self._handles.pop(arm.name, None)
        if handle is None:
            return
        try:
            when = handle.reference_when() if final and not self.control.stop_requested else None
            if when == "loaded":
                self._reference(arm, handle)
            closed = handle.close()
            if not closed.said and closed.left_behind:
                # its process was ended before it could say so itself
                report = {**self._reports.get(arm.name, {}), "left_behind": dict(closed.left_behind)}
                self._log(f"arm {arm.name}: {'; '.join(closed.left_behind.get('close_errors', []))}")
                self.emit(ArmReported(arm.name, report))
            if when == "closed":
                self._reference(arm, handle)
        finally:
            handle.end()

    def _reference(self, arm: Arm, handle: Handle) -> None:
        """The baseline timed by the engine's own tool, on the first prompt
        with a row, at that row's depth."""
        rows = [r for r in self.rows() if r.arm == arm.name and r.status == Status.OK and r.round >= 1]
        names = [p.name for p in self.profile.prompts]
        rows.sort(key=lambda r: (names.index(r.prompt) if r.prompt in names else len(names), r.round))
        handle.reference(rows[0].prompt if rows else None, rows[0].prompt_tokens if rows else None)

    def _end_all(self) -> None:
        """Every arm still held ends, side by side (each may take its grace)."""
        held = list(self._handles.items())
        self._handles.clear()
        ends = [threading.Thread(target=h.end, name=f"end-{name}", daemon=True) for name, h in held]
        for t in ends:
            t.start()
        for t in ends:
            t.join()

    # -- rows of cells that did not run --------------------------------------------------
    def _drop(self, arm: Arm, status: Status, detail: str) -> None:
        """The arm runs no more cells: those left get ``status``."""
        self._dead[arm.name] = (status, detail)
        self._fill(arm, status, detail)

    def _fill(self, arm: Arm, status: Status, detail: str) -> None:
        """Give every cell of an arm that has no row yet a failure row."""
        filled = False
        for cell in self._cells(arm):
            if not self._has_row(cell):
                self._record(arm, CellOutcome(cell, status, detail=detail), ())
                filled = True
        if filled:
            self.emit(StatusChanged(arm_cell(arm.name), status, detail=detail))

    def _record_dead(self, arm: Arm, cell: Cell) -> None:
        if not self._has_row(cell) and arm.name in self._dead:
            status, detail = self._dead[arm.name]
            self._record(arm, CellOutcome(cell, status, detail=detail), ())

    def _record(self, arm: Arm, got: CellOutcome, steps: Sequence[StepEvent]) -> ResultRow:
        cell, gen = got.cell, got.gen
        baseline = pick_baseline(self.rows(), arm.baseline, cell.prompt, cell.round) if arm.baseline else None
        warm = self.profile.run.warm_rounds
        # warm rounds after the first are held to the arm's own cold first round
        cold_first = self._own_round(arm, cell.prompt, 1) if warm and cell.round > 1 else None
        row = build_result(
            arm=arm, prompt=cell.prompt, round=cell.round, status=got.status, steps=steps,
            n_tokens=len(gen.ids) if gen else None, gen_s=gen.gen_s if gen else None,
            prompt_tokens=gen.prompt_tokens if gen else None, prompt_s=gen.prompt_s if gen else None,
            text=gen.text if gen else None, baseline=baseline, peak_mem_bytes=got.peak,
            engine_bytes=gen.engine_bytes if gen else None, process_bytes=got.process, detail=got.detail,
            engine_report=gen.engine_report if gen else None, text_origin=got.origin,
            gpu_keys=self._gpu_keys(arm, cell, gen.gen_s if gen else None, len(gen.ids) if gen else None, steps,
                                    got.gen_end),
            category=self._categories.get(cell.prompt),
            latency=got.latency.to_json() if got.latency is not None else None, contention=got.contention,
            warm=warm, cold_first=cold_first,
            max_tokens=max_tokens(self.profile.run, cell), overshoot=self._overshoot(arm),
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

    def _overshoot(self, arm: Arm) -> int:
        try:
            return int(self.registry.backend(arm.backend).max_overshoot_tokens)
        except Exception:  # noqa: BLE001 - an arm whose backend is gone records its failure row all the same
            return 0

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
