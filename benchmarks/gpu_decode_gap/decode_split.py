"""A one-row decode split at its three host-side points, beside llama-bench.

decode_anatomy says how much each of the lab's layers adds to a baseline
token; this says where, inside the engine, a token's time goes, pass by pass:

  launch  filling the batch and llama_decode: on a GPU the host's own work
          (building or reusing the graph, setting inputs, launching it and
          the copy of the output row), after which the call returns
  wait    llama_synchronize: the device finishing the graph and the copy
  pick    the greedy pick: the host's arg-max over the logits row, or the
          backend sampler's token read back (``--picks gpu``)

On the CPU backend llama_decode computes in the call, so launch holds the
whole decode and wait is near zero. The columns are means over a pass's
tokens; a pass with ``--picks host,gpu`` runs each pick on its own context
in turn (the order alternating pass by pass), and llama-bench's tg runs
every ``--bench-every`` passes, so a drift of the machine shows in all of
them alike. ``--pin CPU`` keeps this process on one core.

    python -m lab_llamacpp.native_first benchmarks/gpu_decode_gap/decode_split.py
        [--model embedded:smollm2] [--n-gpu-layers N] [--tokens 256] [--passes 8]
        [--picks host|gpu|host,gpu] [--bench-every 2] [--pin CPU]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from typing import Any

from benchmarks.decode_overhead import llama_bench_path, llama_bench_tg
from lab.base.events import now  # noqa: E402
from lab.kit import models  # noqa: E402

COLUMNS = ("token", "launch", "wait", "pick")


def split_pass(ctx: Any, target: Any, tokens: int) -> dict[str, float]:
    """Microseconds per token of one pass: the whole token and its parts."""
    import llama_cpp as ll

    ctx.reset()
    ctx.decode([1])
    tok = target.pick(-1)
    launch = wait = pick = 0.0
    t0 = now()
    for _ in range(tokens - 1):
        a = now()
        ctx.batch.fill([tok], ctx.n_past, "last")
        ctx._decode_batch(ctx.n_past)
        ctx.n_past += 1
        b = now()
        ll.llama_synchronize(ctx.ptr)
        c = now()
        tok = target.pick(-1)
        d = now()
        launch += b - a
        wait += c - b
        pick += d - c
    n = tokens - 1
    return {"token": (now() - t0) / n * 1e6, "launch": launch / n * 1e6, "wait": wait / n * 1e6,
            "pick": pick / n * 1e6}


def main() -> int:
    from lab_llamacpp.native_first import load_llama_first

    load_llama_first()
    from lab_llamacpp import engine
    from lab_llamacpp.gpu_pick import OUTPUTS_PER_SEQ, GpuPickTarget
    from lab_llamacpp.target import LlamaTarget

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="embedded:smollm2")
    ap.add_argument("--n-gpu-layers", type=int, default=0)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--passes", type=int, default=8)
    ap.add_argument("--threads", type=int, default=0, help="0: as many as the CPUs this process may use")
    ap.add_argument("--n-ctx", type=int, default=2048)
    ap.add_argument("--picks", default="host", help="host, gpu, or both separated by a comma")
    ap.add_argument("--bench-every", type=int, default=2, help="llama-bench tg before every N-th pass (0: never)")
    ap.add_argument("--pin", type=int, default=None, help="keep this process on one CPU")
    args = ap.parse_args()
    from lab.registry import load_registry

    load_registry()  # model references (tiny:, synthetic:) resolve through the plugins' registry
    picks = [p.strip() for p in args.picks.split(",") if p.strip()]
    if not picks or any(p not in ("host", "gpu") for p in picks):
        ap.error(f"--picks takes host, gpu or host,gpu, not {args.picks!r}")
    if args.pin is not None:
        os.sched_setaffinity(0, {args.pin})
    threads = args.threads or len(os.sched_getaffinity(0))
    path = models.resolve(args.model)
    bench = llama_bench_path() if args.bench_every else None

    engine.init_backend()
    model = engine.Model(str(path), n_gpu_layers=args.n_gpu_layers)
    sides: dict[str, tuple[Any, Any]] = {}
    for p in picks:
        ctx = engine.Context(model, args.n_ctx, 512, threads, outputs_per_seq=OUTPUTS_PER_SEQ if p == "gpu" else 0)
        sides[p] = (ctx, (GpuPickTarget if p == "gpu" else LlamaTarget)(ctx, 0.0, True))
    for ctx, target in sides.values():
        split_pass(ctx, target, min(32, args.tokens))  # warm each context's graphs
    seen: dict[str, dict[str, list[float]]] = {p: {c: [] for c in COLUMNS} for p in picks}
    bench_us: list[float] = []
    for i in range(args.passes):
        if bench is not None and i % args.bench_every == 0:
            bench_us.append(1e6 / llama_bench_tg(bench, path, args.tokens, threads, args.n_gpu_layers))
            print(f"llama-bench tg{args.tokens}: {bench_us[-1]:.1f} us/token", flush=True)
        for p in picks if i % 2 == 0 else picks[::-1]:
            got = split_pass(*sides[p], args.tokens)
            for c in COLUMNS:
                seen[p][c].append(got[c])
            print(f"pass {i + 1} {p}: " + "  ".join(f"{c} {got[c]:.1f}" for c in COLUMNS) + " us/token", flush=True)
    print()
    print(f"model {args.model} ({path.name}), {threads} threads, n_gpu_layers {args.n_gpu_layers}, {args.tokens} tokens, "
          f"n_ctx {args.n_ctx}{f', pinned to CPU {args.pin}' if args.pin is not None else ''}; "
          f"microseconds per token, min / median / max of {args.passes} passes")
    if bench_us:
        print(f"  {'llama-bench':<14} {'token':<7} {min(bench_us):8.1f} {statistics.median(bench_us):8.1f} {max(bench_us):8.1f}")
    for p in picks:
        for c in COLUMNS:
            xs = seen[p][c]
            print(f"  {p + ' pick':<14} {c:<7} {min(xs):8.1f} {statistics.median(xs):8.1f} {max(xs):8.1f}")
    for ctx, _ in sides.values():
        ctx.close()
    model.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
