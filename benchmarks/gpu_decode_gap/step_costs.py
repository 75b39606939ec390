"""Where a verify step's time goes on the host, width by width: one
``llama_decode`` of w rows with every row's logits, each row's greedy pick,
the rollback. With host picks (logits copied, numpy arg-max), with
llama.cpp's backend sampler as the lab's loop runs it (the arg-max alone in
the graph, one id a row back) and with the sampler masking EOG tokens in the
graph first (``gpu-masked``: llama.cpp's logit-bias stage), each width's
passes back to back as a sweep arm runs them. The picks column re-reads rows
already read (in cache); ``step`` times decode, picks and rollback as one,
the rows read once, as the loop reads them.

    python -m benchmarks.gpu_decode_gap.step_costs --model synthetic:llama-8b [--n-gpu-layers 999] [--depth 512] [--n 30]

Medians of --n passes, in microseconds. On the H200 (synthetic:llama-8b) a
host pick cost 14-30 us a row with the row in cache and about 75 us in the
loop; a backend pick 2.4-3.8 us, for a decode that costs about the same.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any, Callable

from lab_llamacpp.native_first import load_llama_first

load_llama_first()


def median_s(fn: Callable[[], Any], n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    from lab_llamacpp import engine
    from lab_llamacpp.gpu_pick import OUTPUTS_PER_SEQ, BackendGreedy

    from lab.kit import models

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="embedded:smollm2")
    ap.add_argument("--n-gpu-layers", type=int, default=0)
    ap.add_argument("--depth", type=int, default=512, help="tokens in the KV cache before the verified rows")
    ap.add_argument("--n", type=int, default=30, help="passes per figure (median)")
    ap.add_argument("--widths", default="1,2,5,9,17")
    args = ap.parse_args()
    from lab.registry import load_registry

    load_registry()  # model references (tiny:, synthetic:) resolve through the plugins' registry
    widths = [int(w) for w in args.widths.split(",")]

    model = engine.Model(str(models.resolve(args.model)), n_gpu_layers=args.n_gpu_layers)
    ctx = engine.Context(model, 2048, 512, len(os.sched_getaffinity(0)), outputs_per_seq=OUTPUTS_PER_SEQ)
    text = "The lighthouse keeper climbed the spiral stairs every evening at dusk and wrote the weather. " * 40
    prefix = model.tokenize(text)[: args.depth]
    rows = model.tokenize(text, add_special=False)[: max(widths)]
    masked = model.eog_ids
    masked_set = frozenset(masked)  # as the lab's host pick holds them
    print(f"model {args.model}, n_gpu_layers {args.n_gpu_layers}, depth {len(prefix)}, vocab {model.n_vocab}; "
          f"medians of {args.n} in microseconds")
    print(f"{'pick':>10} {'w':>3} {'decode':>9} {'picks':>8} {'per pick':>9} {'rollback':>9} {'step':>9}")
    for mode in ("host", "gpu", "gpu-masked"):
        greedy = None if mode == "host" else BackendGreedy(ctx, masked if mode == "gpu-masked" else ())
        ctx.reset()
        ctx.decode(prefix, "last")
        base = ctx.n_past
        for w in widths:
            def decode(w: int = w, base: int = base) -> None:
                ctx.decode(rows[:w], "all")
                ctx.truncate(base)

            def picks(w: int = w, greedy: Any = greedy) -> list[int]:
                if greedy is not None:
                    return [greedy.pick(i) for i in range(w)]
                return [ctx.argmax(i, masked_set) for i in range(w)]

            def rollback(w: int = w, base: int = base) -> None:
                # the removal call's own cost: after the first, the range is empty
                ctx.truncate(base)
                ctx.n_past = base + w

            def step(w: int = w, base: int = base, picks: Callable[..., list[int]] = picks) -> None:
                ctx.decode(rows[:w], "all")
                picks(w)
                ctx.truncate(base)

            for _ in range(3):
                decode()
            t_dec = median_s(decode, args.n)
            ctx.decode(rows[:w], "all")
            t_pick = median_s(picks, args.n)
            t_trunc = median_s(rollback, args.n)
            ctx.truncate(base)
            total = median_s(step, args.n)
            print(f"{mode:>10} {w:>3} {t_dec * 1e6:>9.0f} {t_pick * 1e6:>8.1f} {t_pick / w * 1e6:>9.1f} "
                  f"{t_trunc * 1e6:>9.1f} {total * 1e6:>9.0f}", flush=True)
        if greedy is not None:
            greedy.detach()
    ctx.close()
    model.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
