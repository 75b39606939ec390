"""The runner: arms in order (baselines first), one engine loaded at a time,
warmup unrecorded, then every prompt x round. It knows nothing of Textual:
it emits events to whoever listens (store, CLI progress, TUI).

Failures are results: an arm that fails to load or whose engine runs out of
memory or crashes gets that status in its rows and the run goes on. Every
backend is closed on every path, Ctrl-C included.
"""

from __future__ import annotations

import dataclasses
import threading
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from lab.api import (
    Backend,
    BackendContext,
    Cancelled,
    Drafter,
    DrafterContext,
    EngineFailure,
    Generation,
    GenerationRequest,
)
from lab.events import (
    Cell,
    Emit,
    Event,
    Finished,
    Held,
    RunFinished,
    RunStarted,
    Status,
    StatusChanged,
    StepEvent,
    TokenEvent,
    arm_cell,
    now,
)
from lab.memory import MemorySampler
from lab.plugins import Registry
from lab.profiles import Arm, Profile
from lab.results import add_origin, build_result, pick_baseline
from lab.store import RunStore


@dataclass
class _ArmState:
    skip: bool = False


@dataclass
class RunControl:
    """Thread-safe controls a UI can use while a run is going."""

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
        self._skip_arm.set()

    def cancel_arm(self, arm: str) -> None:
        """Cancel one arm that has not started: the runner records its cells
        as cancelled without loading its engine."""
        with self._lock:
            self._cancelled_arms.add(arm)

    def arm_cancelled(self, arm: str) -> bool:
        with self._lock:
            return arm in self._cancelled_arms

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
            if self._cancel.is_set() or self._skip_arm.is_set():
                break
        return now() - t0

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()


class Runner:
    def __init__(
        self,
        profile: Profile,
        registry: Registry,
        store: RunStore | None = None,
        listeners: Sequence[Emit] = (),
        control: RunControl | None = None,
    ) -> None:
        self.profile = profile
        self.registry = registry
        self.store = store
        self.listeners = list(listeners)
        self.control = control or RunControl()
        self.results: list[dict[str, Any]] = []
        # (arm, prompt, round) -> output ids of baseline arms, for the oracle
        self.reference_ids: dict[tuple[str, str, int], list[int]] = {}
        self._lock = threading.Lock()

    # -- events -------------------------------------------------------------
    def emit(self, event: Event) -> None:
        if self.store is not None and isinstance(event, StepEvent):
            self.store.add_step(event)
        for listener in self.listeners:
            try:
                listener(event)
            except Exception:  # noqa: BLE001 - a broken listener must not stop a run
                traceback.print_exc()

    def _log(self, text: str) -> None:
        if self.store is not None:
            with open(self.store.log_path("lab.log"), "a", encoding="utf-8") as fh:
                fh.write(text.rstrip("\n") + "\n")

    # -- run ------------------------------------------------------------------
    def run(self) -> list[dict[str, Any]]:
        run_dir = str(self.store.path) if self.store else ""
        self.emit(
            RunStarted(
                self.profile.name, run_dir, tuple(a.name for a in self.profile.arms),
                tuple(p.name for p in self.profile.prompts), self.profile.run.rounds,
            )
        )
        interrupted = False
        try:
            for arm in self.profile.ordered_arms():
                if self.control.cancelled:
                    self._fill(arm, "cancelled", "run cancelled before this arm started")
                    continue
                if self.control.arm_cancelled(arm.name):
                    self._fill(arm, "cancelled", "arm cancelled before it started")
                    continue
                self.control._skip_arm.clear()
                self._run_arm(arm)
        except KeyboardInterrupt:
            interrupted = True
            self.control.cancel()
            done = {(r["arm"], r["prompt"], r["round"]) for r in self.results}
            for arm in self.profile.arms:
                self._fill(arm, "cancelled", "interrupted", skip=done)
            raise
        finally:
            if self.store is not None:
                self.store.finish(cancelled=self.control.cancelled or interrupted)
            self.emit(RunFinished(run_dir, cancelled=self.control.cancelled or interrupted))
        return self.results

    def _hold(self, cell: Cell, in_cell: bool) -> float:
        """Wait here while the run is paused; returns the seconds held."""
        if not self.control.paused or self.control.cancelled or self.control._skip_arm.is_set():
            return 0.0
        self.emit(Held(cell, None, in_cell))
        seconds = self.control.hold()
        self.emit(Held(cell, seconds, in_cell))
        return seconds

    def _cells(self, arm: Arm) -> list[Cell]:
        return [
            Cell(arm.name, p.name, r)
            for p in self.profile.prompts
            for r in range(1, self.profile.run.rounds + 1)
        ]

    def _fill(self, arm: Arm, status: str, detail: str, skip: set[tuple[str, str, int]] | None = None) -> None:
        """Give every (remaining) cell of an arm a failure row."""
        for cell in self._cells(arm):
            if skip is not None and (cell.arm, cell.prompt, cell.round) in skip:
                continue
            if any(r["arm"] == cell.arm and r["prompt"] == cell.prompt and r["round"] == cell.round for r in self.results):
                continue
            self._record(arm, cell, status, detail=detail)
        self.emit(StatusChanged(arm_cell(arm.name), Status(status), detail=detail))

    def _record(self, arm: Arm, cell: Cell, status: str, gen: Generation | None = None,
                steps: Sequence[StepEvent] = (), detail: str = "", peak: int | None = None,
                origin: Sequence[Sequence[int]] | None = None) -> dict[str, Any]:
        baseline = pick_baseline(self.results, arm.baseline, cell.prompt, cell.round) if arm.baseline else None
        row = build_result(
            arm=arm, prompt=cell.prompt, round=cell.round, status=status, steps=steps,
            n_tokens=len(gen.ids) if gen else None, gen_s=gen.gen_s if gen else None,
            prompt_tokens=gen.prompt_tokens if gen else None, prompt_s=gen.prompt_s if gen else None,
            text=gen.text if gen else None, baseline=baseline, peak_mem_bytes=peak,
            engine_bytes=gen.engine_bytes if gen else None, detail=detail,
            engine_report=gen.engine_report if gen else None, text_origin=origin,
        )
        self.results.append(row)
        if self.store is not None:
            self.store.add_result(row)
        self.emit(Finished(cell, row))
        return row

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
        return GenerationRequest(
            cell=cell, prompt=prompt.text, system=prompt.system, chat_template=run.chat_template,
            max_tokens=run.max_tokens, temperature=run.temperature, seed=run.seed,
            ignore_eos=run.ignore_eos, n_max=arm.n_max,
        )

    def _run_arm(self, arm: Arm) -> None:
        cell0 = arm_cell(arm.name)
        ctx = BackendContext(self.profile.run, str(self.store.path) if self.store else "", self._log)
        backend: Backend | None = None
        drafter: Drafter | None = None
        engine_bytes: list[int | None] = [None]
        try:
            backend = self.registry.backend(arm.backend)(arm, ctx)
            sampler = MemorySampler(
                arm.name, self.emit, self.profile.run.memory_interval_s,
                child_pids=backend.child_pids, engine_bytes=lambda: engine_bytes[0],
            )
            with sampler:
                self.emit(StatusChanged(cell0, Status.LOADING, phase="loading"))
                try:
                    backend.load(self.emit)
                    if arm.drafter is not None:
                        self.emit(StatusChanged(cell0, Status.LOADING, phase=f"loading drafter {arm.drafter}"))
                        drafter = self._make_drafter(arm, backend)
                        drafter.load()
                        backend.attach_drafter(drafter)
                    engine_bytes[0] = backend.engine_bytes()
                except EngineFailure as exc:
                    self._fill(arm, exc.status, _detail(exc))
                    return
                except Exception as exc:  # noqa: BLE001 - a broken arm is a result
                    self._log(traceback.format_exc())
                    self._fill(arm, "error", f"load failed: {type(exc).__name__}: {exc}")
                    return
                self._run_cells(arm, backend, sampler, engine_bytes)
        finally:
            if drafter is not None:
                try:
                    drafter.close()
                except Exception:  # noqa: BLE001
                    self._log(traceback.format_exc())
            if backend is not None:
                try:
                    if self.store is not None:
                        self.store.set_arm_report(arm.name, backend.report())
                except Exception:  # noqa: BLE001
                    self._log(traceback.format_exc())
                backend.close()

    def _make_drafter(self, arm: Arm, backend: Backend) -> Drafter:
        run = self.profile.run
        dcls = self.registry.drafter(arm.drafter or "")
        dctx = DrafterContext(
            stack=arm.stack, target_model=arm.model, vocab_size=backend.vocab_size(),
            n_ctx=run.n_ctx, threads=run.threads, seed=run.seed, temperature=run.temperature,
            reference=self._reference(arm), log=self._log,
        )
        return dcls(arm.drafter_options, dctx)

    def _run_cells(self, arm: Arm, backend: Backend, sampler: MemorySampler, engine_bytes: list[int | None]) -> None:
        cell0 = arm_cell(arm.name)
        run = self.profile.run
        warm_cells = [Cell(arm.name, self.profile.prompts[0].name, 0)] * run.warmup
        crashed: str | None = None
        for cell in [*warm_cells, *self._cells(arm)]:
            if crashed is not None:
                if not cell.is_warmup:
                    self._record(arm, cell, "crashed", detail=crashed, peak=sampler.peak)
                continue
            self._hold(cell, in_cell=False)
            if self.control.cancelled or self.control._skip_arm.is_set():
                if not cell.is_warmup:
                    self._record(arm, cell, "cancelled", detail="cancelled", peak=sampler.peak)
                continue
            status = Status.WARMUP if cell.is_warmup else Status.RUNNING
            self.emit(StatusChanged(cell, status, phase="warmup" if cell.is_warmup else "generating"))
            steps: list[StepEvent] = []
            held = [0.0]
            pausable = backend.pauses_between_steps()
            origin: list[list[int]] = []

            def collect(event: Event, steps: list[StepEvent] = steps, origin: list[list[int]] = origin) -> None:
                if isinstance(event, StepEvent):
                    steps.append(event)
                elif isinstance(event, TokenEvent):
                    add_origin(origin, len(event.text), event.from_draft)
                self.emit(event)

            def cancelled(cell: Cell = cell, held: list[float] = held, pausable: bool = pausable) -> bool:
                if pausable:
                    held[0] += self._hold(cell, in_cell=True)
                return self.control.cancelled or self.control._skip_arm.is_set()

            try:
                gen = backend.generate(self._request(cell, arm), collect, cancelled)
            except Cancelled:
                if not cell.is_warmup:
                    self._record(arm, cell, "cancelled", detail="cancelled", peak=sampler.peak)
                continue
            except EngineFailure as exc:
                if not cell.is_warmup:
                    self._record(arm, cell, exc.status, detail=_detail(exc), peak=sampler.peak)
                if exc.status == "crashed":
                    crashed = f"engine crashed earlier in this arm: {exc}"
                continue
            except Exception as exc:  # noqa: BLE001
                self._log(traceback.format_exc())
                if not cell.is_warmup:
                    self._record(arm, cell, "error", detail=f"{type(exc).__name__}: {exc}", peak=sampler.peak)
                continue
            sampler.sample()
            if held[0]:
                # Held between steps: no step was timed across the pause,
                # only the cell's generation clock ran on.
                gen = dataclasses.replace(
                    gen, gen_s=gen.gen_s - held[0], engine_report={**gen.engine_report, "paused_s": held[0]})
            if arm.is_baseline:
                self.reference_ids[(arm.name, cell.prompt, cell.round)] = list(gen.ids)
            if not cell.is_warmup:
                self._record(arm, cell, "ok", gen, steps, peak=sampler.peak, origin=origin)
        final = [r["status"] for r in self.results if r["arm"] == arm.name]
        worst = next((s for s in ("crashed", "oom", "error", "cancelled") if s in final), "ok")
        self.emit(StatusChanged(cell0, Status(worst)))


def _detail(exc: EngineFailure) -> str:
    text = str(exc)
    if exc.log_excerpt:
        text += "\n--- engine log ---\n" + exc.log_excerpt
    return text
