"""What a process's earlier model loads do to the next one's decode speed.

On a GPU, a lab baseline that follows another lab run in the same process
decodes slower than one that follows llama-bench (decode_overhead.py prints
the two apart). This measures the engine alone, with no runner: one-row
decodes with host greedy picks, the median microseconds per token of
``--tokens`` decodes, after each of these:

  after another process   llama-bench (``--other``, a small model) used the
                          GPU in between, then this process loaded the model
  right after a free      this process freed the model and loaded it again
  after device picks      this process freed a model whose context had
                          picked on the GPU (llama.cpp's backend sampler, as
                          a lab run's speculative arms do), then loaded it
  new context             the same model kept, a new context on it
  cleared context         the same context, its memory cleared
  after idle              this process freed the model, slept ``--idle`` s,
                          loaded it again
  overlapping load        the next model loaded while the last was still
                          loaded, the last freed before the timed decodes

Then a lab run of three identical baseline arms (the runner loads a model
per arm, one after another): each arm's decodes per second, first right
after llama-bench, then right after the last lab run. Every case runs
``--cycles`` times; figures are min / median / max over the cycles.

    python -m lab_llamacpp.native_first benchmarks/gpu_decode_gap/reload_state.py --model synthetic:llama-8b --n-gpu-layers 999
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from lab.kit import models

if TYPE_CHECKING:
    from lab_llamacpp.engine import Context

from benchmarks.decode_overhead import bench_profile, llama_bench_path


def per_token_us(ctx: Context, tokens: int) -> float:
    """Median microseconds of one decode and its pick, after 16 untimed."""
    ctx.reset()
    prompt = ctx.model.tokenize("The")
    ctx.decode(prompt)
    tok = ctx.argmax(len(prompt) - 1)
    times = []
    for i in range(16 + tokens):
        t0 = time.perf_counter()
        ctx.decode([tok])
        tok = ctx.argmax(0)
        if i >= 16:
            times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def device_picks(path: str, ngl: int, threads: int, tokens: int) -> None:
    """Load, decode ``tokens`` one-row steps picked by the backend sampler,
    free."""
    from lab_llamacpp.engine import Context, Model
    from lab_llamacpp.gpu_pick import OUTPUTS_PER_SEQ, backend_greedy, host_greedy

    m = Model(path, ngl)
    c = Context(m, 2048, 512, threads, outputs_per_seq=OUTPUTS_PER_SEQ)
    chain = backend_greedy(c)
    prompt = m.tokenize("The")
    c.decode(prompt)
    tok = chain.pick(len(prompt) - 1)
    for _ in range(tokens):
        c.decode([tok])
        tok = chain.pick(0)
    host_greedy(c)
    c.close()
    m.close()


def other_process(bench: Path, model: Path, ngl: int) -> None:
    subprocess.run([str(bench), "-m", str(model), "-p", "0", "-n", "16", "-r", "1", "-ngl", str(ngl), "-o", "json"],
                   capture_output=True, check=True)


def lab_arms(model: str, tokens: int, threads: int, ngl: int, arms: int) -> list[float]:
    """One lab run of ``arms`` identical baseline arms: each one's decodes
    per second, in the order the runner ran them."""
    from lab.profile.load import parse_profile
    from lab.registry import load_registry
    from lab.runner import Runner

    one = bench_profile(model, tokens, threads, ngl)
    head, arm = one.split("[[arms]]")
    text = head + "".join("[[arms]]" + arm.replace('name = "base"', f'name = "base{i}"') for i in range(arms))
    registry = load_registry()
    rows = Runner(parse_profile(text, "arms.toml", registry), registry).run()
    rates = []
    for i in range(arms):
        row = next(r for r in rows if r["arm"] == f"base{i}")
        if row["status"] != "ok":
            sys.exit(f"lab run failed: {row['detail']}")
        rates.append((row["n_tokens"] - 1) / row["gen_s"])
    return rates


def spread(xs: list[float], fmt: str) -> str:
    return f"min {min(xs):{fmt}} / median {statistics.median(xs):{fmt}} / max {max(xs):{fmt}}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="embedded:smollm2")
    ap.add_argument("--other", default="", help="the model llama-bench decodes in between (default: --model)")
    ap.add_argument("--n-gpu-layers", type=int, default=0)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--idle", type=float, default=5.0)
    ap.add_argument("--arms", type=int, default=3)
    args = ap.parse_args()
    from lab.registry import load_registry

    load_registry()  # model references (tiny:, synthetic:) resolve through the plugins' registry
    from lab_llamacpp.engine import Context, Model

    path = str(models.resolve(args.model))
    other = models.resolve(args.other or args.model)
    bench = llama_bench_path()
    threads = len(os.sched_getaffinity(0))
    ngl = args.n_gpu_layers

    def fresh(model: Model | None = None) -> tuple[Model, Context]:
        m = model or Model(path, ngl)
        return m, Context(m, 2048, 512, threads)

    cases: dict[str, list[float]] = {}

    def record(case: str, us: float) -> None:
        cases.setdefault(case, []).append(us)
        print(f"  {case:<24} {us:8.1f} us per token", flush=True)

    arm_rates: dict[str, list[list[float]]] = {"right after llama-bench": [], "right after a lab run": []}
    for cycle in range(args.cycles):
        print(f"cycle {cycle + 1}", flush=True)
        other_process(bench, other, ngl)
        m, c = fresh()
        record("after another process", per_token_us(c, args.tokens))
        for _ in range(2):
            c.close()
            m.close()
            m, c = fresh()
            record("right after a free", per_token_us(c, args.tokens))
        c.close()
        m.close()
        device_picks(path, ngl, threads, args.tokens)
        m, c = fresh()
        record("after device picks", per_token_us(c, args.tokens))
        c.close()
        m, c = fresh(m)
        record("new context", per_token_us(c, args.tokens))
        record("cleared context", per_token_us(c, args.tokens))
        c.close()
        m.close()
        time.sleep(args.idle)
        m, c = fresh()
        record("after idle", per_token_us(c, args.tokens))
        c.close()
        m2, c = fresh()
        m.close()
        record("overlapping load", per_token_us(c, args.tokens))
        c.close()
        m2.close()
        for when in arm_rates:
            if when.endswith("llama-bench"):
                other_process(bench, other, ngl)
            rates = lab_arms(args.model, args.tokens, threads, ngl, args.arms)
            arm_rates[when].append(rates)
            print(f"  lab run {when}: " + ", ".join(f"arm {i + 1} {r:.1f}" for i, r in enumerate(rates)) + " tok/s",
                  flush=True)
    print()
    print(f"model {args.model}, n_gpu_layers {ngl}, {args.tokens} tokens, {args.cycles} cycles, {threads} threads")
    print("engine alone, us per token (decode and host pick):")
    for case, xs in cases.items():
        print(f"  {case:<24} {spread(xs, '.1f')}")
    print(f"lab run of {args.arms} identical baseline arms, decodes per second:")
    for when, runs in arm_rates.items():
        for i in range(args.arms):
            print(f"  {when}, arm {i + 1}: {spread([r[i] for r in runs], '.1f')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
