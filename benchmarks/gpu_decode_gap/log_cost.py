"""What one llama.cpp log line costs the process that decodes.

llama.cpp hands every log line, debug lines included, to the callback its
host installed; on CUDA ggml logs one such line per decode ("CUDA Graph id N
reused"), from inside llama_decode, so the callback's cost lands on every
token. The lab installs a callback that drops the line (``engine.init_backend``);
with ``LAB_LLAMA_VERBOSE=1`` it leaves llama-cpp-python's, which prints each
line to stderr and flushes. This calls ggml's own logger the way ggml-cuda
does (the GIL released, the callback taking it back) under each:

  floor    a ctypes call of ggml that logs nothing
  quiet    the lab's callback
  verbose  llama-cpp-python's printing callback (stderr: run with 2>FILE
           to see the cost of the file the device driver writes to)

    python -m benchmarks.gpu_decode_gap.log_cost [--lines 20000] [--repeats 5] 2>/dev/null

Microseconds per line, min / median / max of the repeats.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

GGML_LOG_LEVEL_DEBUG = 1


def per_call_us(call: Callable[[int], None], lines: int, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for i in range(lines):
            call(i)
        out.append((time.perf_counter() - t0) / lines * 1e6)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

    import llama_cpp as ll
    from lab_llamacpp import engine
    from llama_cpp import _logger

    found = sorted((Path(ll.__file__).parent / "lib").glob("libggml-base.*"))
    if not found:
        sys.exit("libggml-base not found beside llama_cpp: is llama-cpp-python installed with its libraries?")
    ggml = ctypes.CDLL(str(found[0]))
    log = ggml.ggml_log_internal
    log.restype = None
    get = ggml.ggml_log_get
    get.restype = None
    fmt = b"CUDA Graph id %zu reused\n"
    cb, ud = ctypes.c_void_p(), ctypes.c_void_p()

    def floor(_i: int) -> None:
        get(ctypes.byref(cb), ctypes.byref(ud))

    def line(i: int) -> None:
        log(ctypes.c_int(GGML_LOG_LEVEL_DEBUG), fmt, ctypes.c_size_t(i))

    engine.init_backend()  # the lab's quiet callback, kept referenced by the engine
    quiet_cb = engine._log_callback
    rows = {"floor": per_call_us(floor, args.lines, args.repeats),
            "quiet": per_call_us(line, args.lines, args.repeats)}
    ll.llama_log_set(_logger.llama_log_callback, ctypes.c_void_p(0))
    try:
        rows["verbose"] = per_call_us(line, args.lines, args.repeats)
    finally:
        ll.llama_log_set(quiet_cb, ctypes.c_void_p(0))
    for name, us in rows.items():
        print(f"{name:8s} min {min(us):.2f} / median {statistics.median(us):.2f} / max {max(us):.2f} us per line")
    return 0


if __name__ == "__main__":
    sys.exit(main())
