"""GPU telemetry: device memory (whole card and per process), utilization
and power sampled on a thread from NVML (``pynvml``, imported when a reader
opens) or ``nvidia-smi``; and a generation's energy, split into its draft
and verify phases where a loop reports them.

A phase's energy is each sample interval's mean power times its overlap with
the phase, so a draft/verify split is only as fine as the driver's refresh."""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

from lab.base.events import Clock, now
from lab.base.periodic import PeriodicSampler
from lab.base.row import GPU_KEYS

MIB = 1 << 20


@dataclass(frozen=True)
class GpuSample:
    """One reading of one card at ``t`` (``lab.base.events.now`` clock)."""

    t: float
    index: int
    name: str
    memory_used_bytes: int
    memory_total_bytes: int
    utilization_pct: float | None = None
    power_w: float | None = None
    energy_j: float | None = None  # the card's counter; differences matter, not the value
    process_bytes: Mapping[int, int] = field(default_factory=dict)  # pid -> device bytes

    def bytes_of(self, pids: Iterable[int]) -> int | None:
        """Device memory held by these processes, None when the card does not
        report per-process use (some drivers and containers don't)."""
        if not self.process_bytes:
            return None
        return sum(self.process_bytes.get(pid, 0) for pid in pids)


class GpuReader(Protocol):
    source: str

    def read(self) -> list[GpuSample]:
        """One sample per visible card."""

    def close(self) -> None: ...


class NvmlReader:
    """Readings through NVML. ``nvml`` is the ``pynvml`` module (injectable
    so recorded readings can stand in for a card)."""

    source = "nvml"

    def __init__(self, nvml: Any = None) -> None:
        if nvml is None:
            import pynvml as nvml  # type: ignore[import-not-found, no-redef]
        self.nvml = nvml
        nvml.nvmlInit()
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        self.names = [_text(nvml.nvmlDeviceGetName(h)) for h in self.handles]

    def _optional(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except self.nvml.NVMLError:
            return None

    def read(self) -> list[GpuSample]:
        nv = self.nvml
        out = []
        for i, h in enumerate(self.handles):
            t = now()
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            util = self._optional(nv.nvmlDeviceGetUtilizationRates, h)
            power_mw = self._optional(nv.nvmlDeviceGetPowerUsage, h)
            energy_mj = self._optional(nv.nvmlDeviceGetTotalEnergyConsumption, h)
            procs = self._optional(nv.nvmlDeviceGetComputeRunningProcesses, h) or []
            per_pid: dict[int, int] = {}
            for p in procs:
                used = getattr(p, "usedGpuMemory", None)
                if used is not None:
                    per_pid[int(p.pid)] = per_pid.get(int(p.pid), 0) + int(used)
            out.append(
                GpuSample(
                    t=t, index=i, name=self.names[i], memory_used_bytes=int(mem.used),
                    memory_total_bytes=int(mem.total),
                    utilization_pct=float(util.gpu) if util is not None else None,
                    power_w=power_mw / 1000.0 if power_mw is not None else None,
                    energy_j=energy_mj / 1000.0 if energy_mj is not None else None,
                    process_bytes=per_pid,
                )
            )
        return out

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - closing a reader never fails a run
            pass


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


GPU_QUERY = "index,name,memory.used,memory.total,utilization.gpu,power.draw,uuid"
APPS_QUERY = "gpu_uuid,pid,used_memory"


def _number(text: str) -> float | None:
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def parse_smi(gpus_csv: str, apps_csv: str = "", t: float | None = None) -> list[GpuSample]:
    """Samples from ``nvidia-smi``'s GPU and compute-apps CSV queries (MiB, %, W)."""
    t = now() if t is None else t
    by_uuid: dict[str, dict[int, int]] = {}
    for row in csv.reader(io.StringIO(apps_csv), skipinitialspace=True):
        if len(row) < 3:
            continue
        used = _number(row[2])
        pid = _number(row[1])
        if used is None or pid is None:
            continue
        procs = by_uuid.setdefault(row[0].strip(), {})
        procs[int(pid)] = procs.get(int(pid), 0) + int(used * MIB)
    out = []
    for row in csv.reader(io.StringIO(gpus_csv), skipinitialspace=True):
        if len(row) < 6:
            continue
        used, total = _number(row[2]), _number(row[3])
        if used is None or total is None:
            continue
        out.append(
            GpuSample(
                t=t, index=int(row[0]), name=row[1].strip(), memory_used_bytes=int(used * MIB),
                memory_total_bytes=int(total * MIB), utilization_pct=_number(row[4]), power_w=_number(row[5]),
                process_bytes=by_uuid.get(row[6].strip(), {}) if len(row) > 6 else {},
            )
        )
    return out


class SmiReader:
    """Readings by running ``nvidia-smi`` (two queries, ~50 ms each): the
    fallback where NVML's Python binding is missing."""

    source = "nvidia-smi"

    def __init__(self, binary: str | None = None) -> None:
        found = binary or shutil.which("nvidia-smi")
        if not found:
            raise FileNotFoundError("nvidia-smi not found")
        self.binary = found

    def _query(self, what: str, fields: str) -> str:
        out = subprocess.run(
            [self.binary, f"--query-{what}={fields}", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10,
        )
        return out.stdout if out.returncode == 0 else ""

    def read(self) -> list[GpuSample]:
        t = now()
        return parse_smi(self._query("gpu", GPU_QUERY), self._query("compute-apps", APPS_QUERY), t)

    def close(self) -> None:
        return None


def open_reader() -> GpuReader | None:
    """NVML if it loads and sees a card, else nvidia-smi, else None."""
    try:
        reader: GpuReader = NvmlReader()
        if reader.read():
            return reader
        reader.close()
    except Exception:  # noqa: BLE001 - no binding, no driver, no card: try the next way
        pass
    try:
        smi = SmiReader()
        if smi.read():
            return smi
    except (OSError, subprocess.SubprocessError):
        pass
    return None


class GpuSampler(PeriodicSampler):
    """Reads card ``index`` every ``interval`` seconds on its own thread, keeping
    memory peaks for the whole card and per watched process set."""

    def __init__(self, reader: GpuReader, interval: float = 0.05, index: int = 0) -> None:
        super().__init__(interval, "gpu-sampler")
        self.reader = reader
        self.index = index
        self.samples: list[GpuSample] = []
        self._lock = threading.Lock()

    def sample(self) -> GpuSample | None:
        for s in self.reader.read():
            if s.index == self.index:
                with self._lock:
                    self.samples.append(s)
                return s
        return None

    def snapshot(self) -> list[GpuSample]:
        with self._lock:
            return list(self.samples)

    def peak_used_bytes(self) -> int | None:
        got = self.snapshot()
        return max((s.memory_used_bytes for s in got), default=None)

    def peak_bytes_of(self, pids: Iterable[int]) -> int | None:
        watched = list(pids)
        values = [v for s in self.snapshot() if (v := s.bytes_of(watched)) is not None]
        return max(values, default=None)


@dataclass(frozen=True)
class PowerSegment:
    """Between two samples: one mean power."""

    t0: float
    t1: float
    watts: float


def power_segments(samples: Sequence[GpuSample]) -> list[PowerSegment]:
    """Mean power between consecutive samples: from the energy counter where
    both ends have it, else the mean of the two power readings; a reading
    whose counter did not move (the driver had not refreshed) is skipped."""
    ordered = sorted(samples, key=lambda s: s.t)
    ordered = [
        s for i, s in enumerate(ordered)
        if i == 0 or s.energy_j is None or ordered[i - 1].energy_j is None or s.energy_j != ordered[i - 1].energy_j
    ]
    out = []
    for a, b in zip(ordered, ordered[1:]):
        dt = b.t - a.t
        if dt <= 0:
            continue
        if a.energy_j is not None and b.energy_j is not None and b.energy_j >= a.energy_j:
            watts = (b.energy_j - a.energy_j) / dt
        elif a.power_w is not None and b.power_w is not None:
            watts = (a.power_w + b.power_w) / 2
        else:
            continue
        out.append(PowerSegment(a.t, b.t, watts))
    return out


def energy_between(segments: Sequence[PowerSegment], t0: float, t1: float) -> float:
    """Joules spent in [t0, t1]."""
    total = 0.0
    for seg in segments:
        lo, hi = max(seg.t0, t0), min(seg.t1, t1)
        if hi > lo:
            total += seg.watts * (hi - lo)
    return total


def covered_s(segments: Sequence[PowerSegment], t0: float, t1: float) -> float:
    """Seconds of [t0, t1] that samples cover; less than the span means the
    energy figure misses part of it."""
    return sum(max(0.0, min(s.t1, t1) - max(s.t0, t0)) for s in segments)


@dataclass(frozen=True)
class StepPhases:
    """When a speculative step drafted and verified, on the ``now`` clock: a
    StepEvent's ``t`` closes it, ``step_s`` opens it, ``draft_s`` ends the draft."""

    start: float
    draft_end: float
    end: float

    @classmethod
    def of_step(cls, t: float, step_s: float, draft_s: float | None, verify_s: float | None) -> StepPhases:
        start = t - step_s
        if draft_s is None:
            draft_s = step_s - (verify_s or 0.0)
        return cls(start, start + max(0.0, min(draft_s, step_s)), t)


@dataclass(frozen=True)
class Energy:
    """A generation's joules: all of it, and the shares spent while steps
    drafted and verified (the rest is prompt-free loop time between steps)."""

    joules: float
    seconds: float
    covered_s: float
    n_tokens: int
    draft_j: float | None = None
    verify_j: float | None = None

    @property
    def joules_per_token(self) -> float | None:
        return self.joules / self.n_tokens if self.n_tokens else None

    @property
    def mean_watts(self) -> float | None:
        return self.joules / self.covered_s if self.covered_s > 0 else None

    def to_json(self) -> dict[str, float | int | None]:
        return {
            "energy_j": self.joules, "energy_per_token_j": self.joules_per_token, "mean_power_w": self.mean_watts,
            "draft_energy_j": self.draft_j, "verify_energy_j": self.verify_j, "energy_covered_s": self.covered_s,
        }


def generation_energy(
    samples: Sequence[GpuSample], t0: float, t1: float, n_tokens: int, steps: Sequence[StepPhases] = ()
) -> Energy:
    """Energy of a generation phase [t0, t1] that produced ``n_tokens``; with
    ``steps``, the draft and verify phases' shares."""
    segs = power_segments(samples)
    draft_j = verify_j = None
    if steps:
        draft_j = sum(energy_between(segs, s.start, s.draft_end) for s in steps)
        verify_j = sum(energy_between(segs, s.draft_end, s.end) for s in steps)
    return Energy(
        joules=energy_between(segs, t0, t1), seconds=t1 - t0, covered_s=covered_s(segs, t0, t1),
        n_tokens=n_tokens, draft_j=draft_j, verify_j=verify_j,
    )


GPU_FILE = "gpu.json"
SAMPLES_FILE = "gpu-samples.json.gz"
# About the driver's refresh period: faster reads only repeat readings.
NVML_INTERVAL_S = 0.1
SMI_INTERVAL_S = 0.5
# Live readings for the TUI at most this often.
EMIT_INTERVAL_S = 0.25


@dataclass(frozen=True)
class GpuSampled:
    """A live GPU reading: the card's memory in use, the running arm's
    processes' bytes (None where not told), utilization, power; ``arm`` "" between arms."""

    arm: str
    name: str
    card_used_bytes: int
    card_total_bytes: int
    process_bytes: int | None
    utilization_pct: float | None
    power_w: float | None
    t: float = field(default_factory=now)


@dataclass
class _ArmWindow:
    start: float
    pids: Callable[[], list[int]]
    peak_process: int | None = None
    peak_card: int | None = None


class RunTelemetry:
    """GPU telemetry over one run: one sampler, a window per arm for memory
    peaks and per cell for energy; :meth:`cell_keys` gives a row's keys and
    :meth:`write` saves ``gpu.json`` and the raw readings."""

    def __init__(self, reader: GpuReader, interval: float | None = None, emit: Callable[[Any], None] | None = None) -> None:
        if interval is None:
            interval = SMI_INTERVAL_S if reader.source == "nvidia-smi" else NVML_INTERVAL_S
        self.sampler = _EmittingSampler(reader, interval, self)
        self.emit = emit
        self.arm = ""
        self._arms: dict[str, _ArmWindow] = {}
        self._cells: list[dict[str, Any]] = []
        self._last_emit = 0.0

    @classmethod
    def open(cls, emit: Callable[[Any], None] | None = None) -> RunTelemetry | None:
        """Telemetry started on the first visible GPU, or None without one."""
        reader = open_reader()
        if reader is None:
            return None
        return cls(reader, emit=emit).start()

    def start(self) -> RunTelemetry:
        self.sampler.start()
        return self

    def stop(self) -> None:
        self.sampler.stop()
        self.sampler.reader.close()

    def begin_arm(self, arm: str, pids: Callable[[], list[int]]) -> None:
        """An arm starts loading; ``pids`` lists its processes (this one and
        any engine server it started) whenever asked."""
        self.arm = arm
        self._arms[arm] = _ArmWindow(now(), pids)

    def _pids(self, arm: str) -> list[int]:
        import os

        window = self._arms.get(arm)
        extra: list[int] = []
        if window is not None:
            try:
                extra = list(window.pids())
            except Exception:  # noqa: BLE001 - a dead server has no pid to count
                extra = []
        return [os.getpid(), *extra]

    def _update_peaks(self, arm: str) -> _ArmWindow | None:
        window = self._arms.get(arm)
        if window is None:
            return None
        pids = self._pids(arm)
        for s in self.sampler.snapshot():
            if s.t < window.start:
                continue
            window.peak_card = max(window.peak_card or 0, s.memory_used_bytes)
            held = s.bytes_of(pids)
            if held is not None:
                window.peak_process = max(window.peak_process or 0, held)
        return window

    def device_bytes(self, arm: str) -> int | None:
        """The arm's processes' device memory at the latest reading (the
        memory sampler's ``device_bytes``)."""
        got = self.sampler.latest()
        return got.bytes_of(self._pids(arm)) if got is not None else None

    def on_sample(self, s: GpuSample) -> None:
        if self.emit is None or s.t - self._last_emit < EMIT_INTERVAL_S:
            return
        self._last_emit = s.t
        arm = self.arm
        self.emit(GpuSampled(
            arm, s.name, s.memory_used_bytes, s.memory_total_bytes, s.bytes_of(self._pids(arm)) if arm else None,
            s.utilization_pct, s.power_w, s.t,
        ))

    def cell_keys(
        self, arm: str, prompt: str, round: int, t_end: float | None = None, gen_s: float | None = None,
        n_tokens: int | None = None, steps: Sequence[Any] = (),
    ) -> dict[str, Any]:
        """A row's GPU keys: the arm's peaks so far, and for a cell that
        generated its energy over [t_end - gen_s, t_end] per token, split
        into draft and verify where the lab clocked every step as it ran."""
        try:
            self.sampler.sample()  # the cell's last reading, so its window is closed by one
        except Exception:  # noqa: BLE001 - a failing reading is skipped, as the sampler's own
            pass
        window = self._update_peaks(arm)
        samples = self.sampler.snapshot()
        keys: dict[str, Any] = dict.fromkeys(GPU_KEYS)
        keys["gpu_name"] = samples[-1].name if samples else None
        if window is not None:
            keys["gpu_peak_mem_bytes"] = window.peak_process
            keys["gpu_card_peak_bytes"] = window.peak_card
        if t_end is None or gen_s is None or not n_tokens:
            return keys
        phases = [StepPhases.of_step(s.t, s.step_s, s.draft_s, s.verify_s) for s in steps if _clocked(s)]
        e = generation_energy(samples, t_end - gen_s, t_end, n_tokens, phases if len(phases) == len(steps) else ())
        if e.covered_s <= 0:
            return keys
        keys.update(
            gpu_energy_j=e.joules, energy_per_token_j=e.joules_per_token, gpu_mean_power_w=e.mean_watts,
            draft_energy_j=e.draft_j, verify_energy_j=e.verify_j,
        )
        self._cells.append({
            "arm": arm, "prompt": prompt, "round": round, **e.to_json(), "seconds": e.seconds, "n_tokens": n_tokens,
        })
        return keys

    def summary(self) -> dict[str, Any]:
        """gpu.json: the card, the sampling, each arm's peaks and energy per
        token (min, median, max over its cells), and every cell."""
        import statistics

        samples = self.sampler.snapshot()
        per_arm: dict[str, Any] = {}
        for arm, window in self._arms.items():
            cells = [c for c in self._cells if c["arm"] == arm]
            jpt = [c["energy_per_token_j"] for c in cells if c["energy_per_token_j"] is not None]
            total = sum(c["energy_j"] for c in cells)
            draft = [c["draft_energy_j"] for c in cells if c["draft_energy_j"] is not None]
            verify = [c["verify_energy_j"] for c in cells if c["verify_energy_j"] is not None]
            per_arm[arm] = {
                "peak_process_bytes": window.peak_process, "peak_card_bytes": window.peak_card,
                "energy_per_token_j": [min(jpt), statistics.median(jpt), max(jpt)] if jpt else None,
                "energy_j": total if cells else None,
                "draft_share": sum(draft) / total if draft and total > 0 else None,
                "verify_share": sum(verify) / total if verify and total > 0 else None,
            }
        return {
            "source": self.sampler.reader.source, "interval_s": self.sampler.interval, "samples": len(samples),
            "gpu": samples[-1].name if samples else None,
            "memory_total_bytes": samples[-1].memory_total_bytes if samples else None,
            "peak_used_bytes": self.sampler.peak_used_bytes(),
            "refresh_note": "the driver refreshes power and its energy counter on its own period (often 100 ms): a cell's joules "
                            "are exact to one refresh at each end; the draft/verify split apportions refresh windows "
                            "by the time each phase spent in them",
            "per_arm": per_arm, "cells": list(self._cells),
        }

    def write(self, run_dir: str | Any) -> None:
        """gpu.json and the raw readings (column-wise, gzip) in ``run_dir``."""
        import gzip
        import json
        from pathlib import Path

        d = Path(run_dir)
        from lab.base.strictjson import dumps, strict_json

        (d / GPU_FILE).write_text(dumps(self.summary(), indent=1) + "\n", encoding="utf-8")
        samples = self.sampler.snapshot()
        cols = {
            "t": [s.t for s in samples], "memory_used_bytes": [s.memory_used_bytes for s in samples],
            "utilization_pct": [s.utilization_pct for s in samples], "power_w": [s.power_w for s in samples],
            "energy_j": [s.energy_j for s in samples],
            "process_bytes": [{str(k): v for k, v in s.process_bytes.items()} for s in samples],
        }
        with gzip.open(d / SAMPLES_FILE, "wt", encoding="utf-8") as fh:
            json.dump(strict_json(cols), fh, allow_nan=False)


def _clocked(step: Any) -> bool:
    """A step whose draft and verify seconds the lab clocked as they ran."""
    clocks = getattr(step, "clocks", None)
    if clocks is None:
        return True
    return bool(clocks.draft == Clock.MEASURED and clocks.verify == Clock.MEASURED)


class _EmittingSampler(GpuSampler):
    def __init__(self, reader: GpuReader, interval: float, owner: RunTelemetry) -> None:
        super().__init__(reader, interval)
        self.owner = owner

    def sample(self) -> GpuSample | None:
        got = super().sample()
        if got is not None:
            self.owner.on_sample(got)
        return got

    def latest(self) -> GpuSample | None:
        with self._lock:
            return self.samples[-1] if self.samples else None
