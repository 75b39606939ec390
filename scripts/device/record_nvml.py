"""Raw NVML readings of card 0, a few times, as JSON: the recorded readings
the telemetry tests replay."""

from __future__ import annotations

import json
import time

import pynvml as nv  # type: ignore[import-not-found]

nv.nvmlInit()
h = nv.nvmlDeviceGetHandleByIndex(0)
out = {"count": nv.nvmlDeviceGetCount(), "name": str(nv.nvmlDeviceGetName(h)), "readings": []}


def optional(fn, *args):  # type: ignore[no-untyped-def]
    try:
        return fn(*args)
    except nv.NVMLError as exc:
        return f"NVMLError: {exc}"


for _ in range(5):
    mem = nv.nvmlDeviceGetMemoryInfo(h)
    util = optional(nv.nvmlDeviceGetUtilizationRates, h)
    procs = optional(nv.nvmlDeviceGetComputeRunningProcesses, h)
    out["readings"].append({
        "t": time.perf_counter(),
        "memory": {"total": mem.total, "used": mem.used, "free": mem.free},
        "utilization": {"gpu": util.gpu, "memory": util.memory} if not isinstance(util, str) else util,
        "power_mw": optional(nv.nvmlDeviceGetPowerUsage, h),
        "energy_mj": optional(nv.nvmlDeviceGetTotalEnergyConsumption, h),
        "processes": [{"pid": p.pid, "usedGpuMemory": p.usedGpuMemory} for p in procs] if isinstance(procs, list) else procs,
    })
    time.sleep(0.2)
nv.nvmlShutdown()
print(json.dumps(out, indent=1))
