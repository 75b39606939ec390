"""The machine's memory read bandwidth for the decoding roofline: a short
numpy benchmark, cached per machine under the lab's cache's ``probes/``."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from lab.base.machine import available_cores, cache_path, cpu_name

# bumped when the benchmark changes, so older figures are measured again
BENCH_VERSION = 1
# past any last-level cache, well under a second on two cores
BENCH_BYTES = 128 * 2**20
BENCH_REPEATS = 3


def _gpu_names() -> list[str]:
    """Names of the GPUs the engines could use (part of a machine's identity)."""
    try:
        from lab.telemetry.gpu import open_reader

        reader = open_reader()
    except Exception:  # noqa: BLE001 - no GPU telemetry is a machine without a GPU here
        return []
    if reader is None:
        return []
    try:
        return [s.name for s in reader.read()]
    except Exception:  # noqa: BLE001
        return []
    finally:
        reader.close()


_IDENTITY: dict[str, Any] | None = None


def machine_identity() -> dict[str, Any]:
    """What makes two machines' speeds comparable: CPU model, the cores this
    process may use, GPU names. Looked up once per process."""
    global _IDENTITY
    if _IDENTITY is None:
        _IDENTITY = {
            "cpu": cpu_name(), "machine": platform.machine(), "cpu_count": os.cpu_count(),
            "cores": available_cores(), "gpus": _gpu_names(),
        }
    return dict(_IDENTITY)


def identity_key(identity: Mapping[str, Any]) -> str:
    text = json.dumps(dict(identity), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def measure_copy_bandwidth(nbytes: int = BENCH_BYTES, repeats: int = BENCH_REPEATS) -> float:
    """Bytes per second numpy copies (read and written both count), best of
    ``repeats``: a lower bound of the peak."""
    import numpy as np

    n = max(1, nbytes // 8)
    src = np.ones(n, dtype=np.float64)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # first touch: page faults are not bandwidth
    best = 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        elapsed = time.perf_counter() - t0
        if elapsed > 0:
            best = max(best, 2 * n * 8 / elapsed)
    return best


def measure_read_bandwidth(nbytes: int = 256 * 2**20, threads: int | None = None, repeats: int = 3) -> float:
    """Bytes per second ``threads`` threads read summing private buffers,
    best of ``repeats``: a lower bound of the peak."""
    import numpy as np

    n = threads or available_cores()
    per = max(1, nbytes // n // 8)
    bufs = [np.ones(per, dtype=np.float64) for _ in range(n)]
    best = 0.0
    for _ in range(repeats):
        barrier = threading.Barrier(n + 1)

        def work(buf: np.ndarray, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            buf.sum()

        ts = [threading.Thread(target=work, args=(b,)) for b in bufs]
        for t in ts:
            t.start()
        barrier.wait()
        t0 = time.perf_counter()
        for t in ts:
            t.join()
        elapsed = time.perf_counter() - t0
        best = max(best, per * 8 * n / elapsed)
    return best


@dataclass(frozen=True)
class Bandwidth:
    bytes_s: float
    method: str
    measured: str  # when, local time
    seconds: float  # what measuring it cost
    cached: bool


def _measure(threads: int | None) -> tuple[float, str]:
    """The read bandwidth the roofline wants (weights are read, not
    written), from threads summing private buffers; the copy benchmark when
    that fails to give a figure."""
    bw = measure_read_bandwidth(nbytes=BENCH_BYTES, threads=threads)
    if bw > 0:
        return bw, "numpy read (threaded sum)"
    return measure_copy_bandwidth(), "numpy copy"


def _cache_file(threads: int | None, root: Path | None) -> Path:
    identity = machine_identity()
    return (root or cache_path("probes")) / f"bandwidth-{identity_key({**identity, 'threads': threads or 0})}.json"


def forget_bandwidth(threads: int | None = None, root: Path | None = None) -> None:
    """Drop this machine's cached figure (one measured while the machine was
    busy is no figure to keep)."""
    _cache_file(threads, root).unlink(missing_ok=True)


def machine_bandwidth(threads: int | None = None, cache: bool = True, root: Path | None = None) -> Bandwidth:
    """This machine's memory read bandwidth, cached or measured now."""
    identity = machine_identity()
    where = _cache_file(threads, root)
    if cache and where.exists():
        try:
            data = json.loads(where.read_text(encoding="utf-8"))
            if data.get("version") == BENCH_VERSION and float(data["bytes_s"]) > 0:
                return Bandwidth(float(data["bytes_s"]), str(data["method"]), str(data["measured"]),
                                 float(data.get("seconds", 0.0)), cached=True)
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a torn or foreign file is measured again and overwritten
    t0 = time.perf_counter()
    bw, method = _measure(threads)
    spent = time.perf_counter() - t0
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    if cache:
        payload = {"version": BENCH_VERSION, "bytes_s": bw, "method": method, "measured": stamp,
                   "seconds": spent, "machine": identity, "threads": threads}
        tmp = where.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, where)
    return Bandwidth(bw, method, stamp, spent, cached=False)
