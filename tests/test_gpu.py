"""GPU telemetry without a GPU: readings recorded on an NVIDIA H200 (NVML
through nvidia-ml-py, and nvidia-smi's CSV queries) replayed through the
readers, and the energy arithmetic on known power curves."""

from __future__ import annotations

import builtins
import types
from typing import Any

import pytest

from lab.telemetry import gpu

# nvidia-smi --query-gpu=index,name,memory.used,memory.total,utilization.gpu,power.draw,uuid
#            --format=csv,noheader,nounits, recorded on an idle H200
SMI_GPU_IDLE = "0, NVIDIA H200, 0, 143771, 0, 80.98, GPU-6ff59d65-ed80-ca34-2d61-0357d7f1c6b7\n"
# The same query while a model decodes: the idle line with the memory,
# utilization and power NVML read under load (below).
SMI_GPU = "0, NVIDIA H200, 6748, 143771, 91, 316.88, GPU-6ff59d65-ed80-ca34-2d61-0357d7f1c6b7\n"
# --query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits in
# that format, for the process NVML saw (6124 MiB) and a second, smaller one.
SMI_APPS = (
    "GPU-6ff59d65-ed80-ca34-2d61-0357d7f1c6b7, 6446, 6124\n"
    "GPU-6ff59d65-ed80-ca34-2d61-0357d7f1c6b7, 7001, 512\n"
)
SMI_GPU_NA = "0, NVIDIA H200, 0, 143771, 0, [N/A], GPU-6ff59d65-ed80-ca34-2d61-0357d7f1c6b7\n"

# NVML readings of card 0 taken by lab.telemetry.gpu.NvmlReader every ~24 ms while
# the h200-oracle profile ran (an 8B-shape model decoding): t (s, from the
# first), memory used, GPU utilization %, power (mW), energy counter (mJ),
# the one compute process and its bytes. Total memory 150754820096.
NVML_LOADED: list[tuple[float, int, int, int, int, int, int]] = [
    (0.0, 7075659776, 91, 316879, 100714791, 6446, 6421479424),
    (0.028317, 7075659776, 91, 316879, 100714791, 6446, 6421479424),
    (0.05151, 7075659776, 90, 316959, 100714791, 6446, 6421479424),
    (0.075222, 7075659776, 90, 316959, 100714791, 6446, 6421479424),
    (0.099772, 7075659776, 90, 316959, 100746210, 6446, 6421479424),
    (0.128525, 7075659776, 90, 316959, 100746210, 6446, 6421479424),
    (0.151769, 7075659776, 90, 316427, 100746210, 6446, 6421479424),
    (0.175143, 7075659776, 90, 316427, 100746210, 6446, 6421479424),
    (0.199818, 7075659776, 90, 316427, 100777754, 6446, 6421479424),
    (0.228441, 7075659776, 90, 316427, 100777754, 6446, 6421479424),
    (0.25172, 7075659776, 90, 316273, 100777754, 6446, 6421479424),
    (0.275175, 7075659776, 90, 316273, 100777754, 6446, 6421479424),
]
# The same card idle (scripts/device/record_nvml.py): used, power (mW), energy (mJ), 0.2 s apart.
NVML_IDLE: list[tuple[int, int, int]] = [
    (644939776, 80988, 2538934),
    (644939776, 80975, 2555104),
    (644939776, 80963, 2571276),
    (644939776, 80946, 2587436),
    (644939776, 80940, 2603603),
]
NVML_TOTAL = 150754820096
NVML_NAME = "NVIDIA H200"
MIB = 1 << 20


def loaded_readings() -> list[dict[str, Any]]:
    return [
        {"memory": {"total": NVML_TOTAL, "used": used}, "utilization": {"gpu": util, "memory": 0},
         "power_mw": mw, "energy_mj": mj, "processes": [{"pid": pid, "usedGpuMemory": b}]}
        for _t, used, util, mw, mj, pid, b in NVML_LOADED
    ]


class ReplayNvml(types.SimpleNamespace):
    """The slice of pynvml the reader calls, answering from recorded readings."""

    class NVMLError(Exception):
        pass

    def __init__(self, readings: list[dict[str, Any]], name: str | bytes = NVML_NAME, energy: bool = True) -> None:
        super().__init__()
        self.readings = readings
        self.name = name
        self.energy = energy
        self.i = 0
        self.shut = False

    def nvmlInit(self) -> None:
        return None

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return f"h{i}"

    def nvmlDeviceGetName(self, h: str) -> str | bytes:
        return self.name

    def _now(self) -> dict[str, Any]:
        return self.readings[min(self.i, len(self.readings) - 1)]

    def nvmlDeviceGetMemoryInfo(self, h: str) -> Any:
        r = self._now()
        return types.SimpleNamespace(**r["memory"])

    def nvmlDeviceGetUtilizationRates(self, h: str) -> Any:
        return types.SimpleNamespace(**self._now()["utilization"])

    def nvmlDeviceGetPowerUsage(self, h: str) -> int:
        return int(self._now()["power_mw"])

    def nvmlDeviceGetTotalEnergyConsumption(self, h: str) -> int:
        if not self.energy:
            raise self.NVMLError("Not Supported")
        return int(self._now()["energy_mj"])

    def nvmlDeviceGetComputeRunningProcesses(self, h: str) -> list[Any]:
        procs = [types.SimpleNamespace(**p) for p in self._now()["processes"]]
        self.i += 1  # the last call of one read: the next read replays the next reading
        return procs


def test_smi_csv_gives_memory_power_and_per_process_bytes() -> None:
    (s,) = gpu.parse_smi(SMI_GPU, SMI_APPS, t=1.0)
    assert (s.index, s.name) == (0, "NVIDIA H200")
    assert s.memory_used_bytes == 6748 * MIB
    assert s.memory_total_bytes == 143771 * MIB
    assert s.utilization_pct == 91.0
    assert s.power_w == pytest.approx(316.88)
    assert s.process_bytes == {6446: 6124 * MIB, 7001: 512 * MIB}
    assert s.bytes_of([6446]) == 6124 * MIB
    assert s.bytes_of([6446, 7001, 1]) == (6124 + 512) * MIB
    (idle,) = gpu.parse_smi(SMI_GPU_IDLE, "", t=0.0)
    assert (idle.memory_used_bytes, idle.power_w) == (0, pytest.approx(80.98))


def test_smi_csv_without_power_or_processes() -> None:
    (s,) = gpu.parse_smi(SMI_GPU_NA, "", t=0.0)
    assert s.power_w is None
    assert s.memory_used_bytes == 0
    assert s.bytes_of([6446]) is None  # unknown, not zero
    assert gpu.parse_smi("", "") == []
    assert gpu.parse_smi("garbage\n", "also, garbage\n") == []


def test_nvml_reader_replays_recorded_readings() -> None:
    readings = loaded_readings()
    nv = ReplayNvml(readings, name=NVML_NAME.encode())
    reader = gpu.NvmlReader(nv)
    samples = [reader.read()[0] for _ in readings]
    reader.close()
    assert nv.shut
    first = samples[0]
    assert first.name == NVML_NAME
    assert first.memory_total_bytes == NVML_TOTAL
    assert first.memory_used_bytes == NVML_LOADED[0][1]
    assert first.power_w == pytest.approx(NVML_LOADED[0][3] / 1000)
    assert first.energy_j == pytest.approx(NVML_LOADED[0][4] / 1000)
    assert first.bytes_of([NVML_LOADED[0][5]]) == NVML_LOADED[0][6]
    assert first.bytes_of([1]) == 0
    assert [s.utilization_pct for s in samples] == [float(r[2]) for r in NVML_LOADED]


def test_nvml_reader_without_energy_counter_still_reads_power() -> None:
    reader = gpu.NvmlReader(ReplayNvml(loaded_readings(), energy=False))
    (s,) = reader.read()
    assert s.energy_j is None
    assert s.power_w == pytest.approx(NVML_LOADED[0][3] / 1000)


def recorded_samples() -> list[gpu.GpuSample]:
    return [
        gpu.GpuSample(t=t, index=0, name=NVML_NAME, memory_used_bytes=used, memory_total_bytes=NVML_TOTAL,
                      utilization_pct=util, power_w=mw / 1000, energy_j=mj / 1000)
        for t, used, util, mw, mj, _pid, _b in NVML_LOADED
    ]


def test_a_counter_read_between_refreshes_is_not_zero_watts() -> None:
    """The recorded counter moves every 100 ms while it was read every ~24 ms:
    the segments run refresh to refresh and agree with the power readings."""
    segs = gpu.power_segments(recorded_samples())
    assert len(segs) == 2  # three distinct counter values after the first
    readings_w = [r[3] / 1000 for r in NVML_LOADED]
    for seg in segs:
        assert seg.t1 - seg.t0 == pytest.approx(0.1, abs=0.01)
        assert min(readings_w) * 0.97 < seg.watts < max(readings_w) * 1.03
    # over the recorded span: ~31.5 J per refresh, ~315 W
    joules = gpu.energy_between(segs, segs[0].t0, segs[-1].t1)
    assert joules == pytest.approx((NVML_LOADED[8][4] - NVML_LOADED[0][4]) / 1000 - 0.0, rel=0.01)


def test_idle_counter_and_power_reading_agree() -> None:
    samples = [
        gpu.GpuSample(t=0.2 * i, index=0, name=NVML_NAME, memory_used_bytes=used, memory_total_bytes=NVML_TOTAL,
                      power_w=mw / 1000, energy_j=mj / 1000)
        for i, (used, mw, mj) in enumerate(NVML_IDLE)
    ]
    by_counter = gpu.power_segments(samples)
    by_power = gpu.power_segments([gpu.GpuSample(**{**s.__dict__, "energy_j": None}) for s in samples])
    span = (samples[0].t, samples[-1].t)
    assert gpu.energy_between(by_counter, *span) == pytest.approx(gpu.energy_between(by_power, *span), rel=0.01)


def sample(t: float, watts: float | None = None, joules: float | None = None, used: int = 0) -> gpu.GpuSample:
    return gpu.GpuSample(t=t, index=0, name="card", memory_used_bytes=used, memory_total_bytes=1 << 30,
                         power_w=watts, energy_j=joules)


def test_energy_counter_is_preferred_over_power_readings() -> None:
    # Power readings say 100 W; the counter says 300 J a second passed: the
    # counter is exact, the readings are averaged by the driver.
    samples = [sample(0.0, 100, 1000.0), sample(1.0, 100, 1300.0), sample(2.0, 100, 1600.0)]
    assert gpu.energy_between(gpu.power_segments(samples), 0.0, 2.0) == pytest.approx(600.0)
    no_counter = [sample(s.t, s.power_w) for s in samples]
    assert gpu.energy_between(gpu.power_segments(no_counter), 0.0, 2.0) == pytest.approx(200.0)


def test_trapezoid_partial_windows_and_gaps() -> None:
    segs = gpu.power_segments([sample(0.0, 100), sample(1.0, 300), sample(3.0, None), sample(4.0, 50), sample(5.0, 50)])
    # [0,1] at 200 W mean; [1,3] and [3,4] unknown; [4,5] at 50 W
    assert gpu.energy_between(segs, 0.0, 1.0) == pytest.approx(200.0)
    assert gpu.energy_between(segs, 0.5, 4.5) == pytest.approx(100.0 + 25.0)
    assert gpu.covered_s(segs, 0.5, 4.5) == pytest.approx(1.0)
    # a counter that went backwards (driver reload) is not a negative energy
    back = gpu.power_segments([sample(0.0, 10, 500.0), sample(1.0, 30, 100.0)])
    assert back[0].watts == pytest.approx(20.0)


def test_generation_energy_splits_draft_and_verify() -> None:
    # 100 W while drafting (0-1 s of each 3 s step), 400 W while verifying.
    samples = []
    joules = 0.0
    for step in range(4):
        t = step * 3.0
        samples.append(sample(t, None, joules))
        joules += 100.0
        samples.append(sample(t + 1.0, None, joules))
        joules += 800.0
    samples.append(sample(12.0, None, joules))
    steps = [gpu.StepPhases.of_step(t=s * 3.0 + 3.0, step_s=3.0, draft_s=1.0, verify_s=2.0) for s in range(4)]
    e = gpu.generation_energy(samples, 0.0, 12.0, n_tokens=18, steps=steps)
    assert e.joules == pytest.approx(3600.0)
    assert e.draft_j == pytest.approx(400.0)
    assert e.verify_j == pytest.approx(3200.0)
    assert e.joules_per_token == pytest.approx(200.0)
    assert e.mean_watts == pytest.approx(300.0)
    assert e.to_json()["energy_per_token_j"] == pytest.approx(200.0)


def test_step_phases_without_a_draft_clock() -> None:
    p = gpu.StepPhases.of_step(t=10.0, step_s=0.5, draft_s=None, verify_s=0.4)
    assert (p.start, p.draft_end, p.end) == pytest.approx((9.5, 9.6, 10.0))
    q = gpu.StepPhases.of_step(t=10.0, step_s=0.5, draft_s=2.0, verify_s=None)  # clamped to the step
    assert q.draft_end == pytest.approx(10.0)


class Replay:
    source = "replay"

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.i = 0

    def read(self) -> list[gpu.GpuSample]:
        text = self.texts[min(self.i, len(self.texts) - 1)]
        self.i += 1
        return gpu.parse_smi(text, SMI_APPS if self.i > 1 else "", t=float(self.i))

    def close(self) -> None:
        return None


def test_sampler_keeps_card_samples_and_peaks() -> None:
    sampler = gpu.GpuSampler(Replay([SMI_GPU_IDLE, SMI_GPU, SMI_GPU_IDLE]), interval=0.001)
    with sampler:
        while len(sampler.snapshot()) < 3:
            pass
    got = sampler.snapshot()
    assert got[0].memory_used_bytes == 0
    assert sampler.peak_used_bytes() == 6748 * MIB
    assert sampler.peak_bytes_of([6446]) == 6124 * MIB


def test_open_reader_without_nvml_or_nvidia_smi(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_pynvml(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "pynvml":
            raise ImportError("no pynvml here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pynvml)
    monkeypatch.setattr(gpu.shutil, "which", lambda _name: None)
    assert gpu.open_reader() is None
