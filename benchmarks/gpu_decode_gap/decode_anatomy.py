"""Where a baseline token's time goes between llama-bench and a lab run.

The lab's baseline decodes one token at a time, as llama-bench's tg test
does, but each token also passes through Python: the ctypes calls, the
greedy pick, the generation loop's bookkeeping and events, and the runner
with its listeners and sampler threads. This benchmark adds those layers
one at a time on one model and reports microseconds per decoded token:

  llama-bench  llama-bench -n N (its tg test: no pick, no Python)
  engine       lab_llamacpp.engine: decode one token, synchronize, pick it
               (host arg-max, or the backend sampler with --gpu-pick on),
               feed it back: the ctypes floor
  loop         lab.kit.speculative.generate with no drafter and no listener
  runner       a lab run of one baseline arm (lab.runner.Runner): events,
               memory, contention and GPU samplers
  runner-bare  the same run with the sampler threads not started

Each layer's row is the median of --repeats passes, the layers interleaved
within a repeat so that machine noise hits them alike; the last column is
each layer's cost over the one above it.

    python -m benchmarks.gpu_decode_gap.decode_anatomy [--model embedded:smollm2] [--tokens 256] [--repeats 3]
                                        [--n-gpu-layers N] [--gpu-pick auto|on|off] [--n-ctx 2048]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from typing import Any, Callable

from benchmarks.decode_overhead import bench_profile, llama_bench_path, llama_bench_tg, samplers_off
from lab.base.events import Cell, now  # noqa: E402
from lab.kit import models  # noqa: E402

LAYERS = ("llama-bench", "engine", "loop", "runner", "runner-bare")


def engine_pass(ctx: Any, target: Any, first: int, tokens: int) -> float:
    """Seconds per decoded token of a bare ctypes loop (the lab's engine
    wrapper, no generation loop around it)."""
    ctx.reset()
    tok = first
    ctx.decode([tok], "last")
    tok = target.pick(-1)
    t0 = now()
    for _ in range(tokens - 1):
        ctx.decode([tok], "last")
        tok = target.pick(-1)
    return (now() - t0) / (tokens - 1)


def loop_pass(target: Any, prompt: list[int], tokens: int) -> float:
    from lab.api import GenerationRequest
    from lab.kit.speculative import generate

    req = GenerationRequest(cell=Cell("anatomy", "p", 1), prompt="", system=None, chat_template=False,
                            max_tokens=tokens, temperature=0.0, seed=0, ignore_eos=True, n_max=None)
    gen = generate(target, prompt, req, lambda e: None, lambda: False)
    return gen.gen_s / (len(gen.ids) - 1)


def runner_pass(args: argparse.Namespace, threads: int, bare: bool) -> float:
    from lab.profile.load import parse_profile
    from lab.registry import load_registry
    from lab.runner import Runner

    registry = load_registry()
    text = bench_profile(args.model, args.tokens, threads, args.n_gpu_layers, args.gpu_pick, n_ctx=args.n_ctx)
    profile = parse_profile(text, "anatomy.toml", registry)
    if bare:
        with samplers_off():
            rows = Runner(profile, registry).run()
    else:
        rows = Runner(profile, registry).run()
    row = rows[0]
    if row["status"] != "ok":
        sys.exit(f"lab run failed: {row['detail']}")
    return row["gen_s"] / (row["n_tokens"] - 1)


def main() -> int:
    from lab_llamacpp.native_first import load_llama_first

    load_llama_first()
    from lab_llamacpp import engine
    from lab_llamacpp.gpu_pick import OUTPUTS_PER_SEQ, GpuPickTarget
    from lab_llamacpp.target import LlamaTarget, wants_gpu_pick

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="embedded:smollm2")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="0: as many as the CPUs this process may use")
    ap.add_argument("--n-gpu-layers", type=int, default=0)
    ap.add_argument("--gpu-pick", choices=("auto", "on", "off"), default="auto")
    ap.add_argument("--n-ctx", type=int, default=2048)
    args = ap.parse_args()
    from lab.registry import load_registry

    load_registry()  # model references (tiny:, synthetic:) resolve through the plugins' registry
    threads = args.threads or len(os.sched_getaffinity(0))
    path = models.resolve(args.model)
    bench = llama_bench_path()
    gpu_pick = wants_gpu_pick(args.gpu_pick, args.n_gpu_layers, 0.0)

    engine.init_backend()
    model = engine.Model(str(path), n_gpu_layers=args.n_gpu_layers)
    ctx = engine.Context(model, args.n_ctx, 512, threads, outputs_per_seq=OUTPUTS_PER_SEQ if gpu_pick else 0)
    target = GpuPickTarget(ctx, 0.0, True) if gpu_pick else LlamaTarget(ctx, 0.0, True)
    prompt = model.tokenize("The")
    first = prompt[-1]

    layers: dict[str, Callable[[], float]] = {
        "llama-bench": lambda: 1.0 / llama_bench_tg(bench, path, args.tokens, threads, args.n_gpu_layers),
        "engine": lambda: engine_pass(ctx, target, first, args.tokens),
        "loop": lambda: loop_pass(target, prompt, args.tokens),
        "runner": lambda: runner_pass(args, threads, bare=False),
        "runner-bare": lambda: runner_pass(args, threads, bare=True),
    }
    engine_pass(ctx, target, first, min(args.tokens, 32))  # warm the context's graphs
    seconds: dict[str, list[float]] = {name: [] for name in LAYERS}
    for i in range(args.repeats):
        for name in LAYERS:
            seconds[name].append(layers[name]())
        print(f"repeat {i + 1}: " + ", ".join(f"{n} {seconds[n][-1] * 1e6:.1f}" for n in LAYERS) + " us/token",
              flush=True)
    print()
    print(f"model {args.model} ({path.name}), {threads} threads, n_gpu_layers {args.n_gpu_layers}, "
          f"{args.tokens} tokens, n_ctx {args.n_ctx}, greedy picks {'by the backend sampler' if gpu_pick else 'on the host'}; "
          f"microseconds per decoded token, min / median / max of {args.repeats}")
    above: float | None = None
    for name in LAYERS:
        xs = [s * 1e6 for s in seconds[name]]
        med = statistics.median(xs)
        step = f"{med - above:+8.1f}" if above is not None else " " * 8
        print(f"  {name:<12} {min(xs):9.1f} {med:9.1f} {max(xs):9.1f}   {step}")
        above = med
    bench_med = statistics.median(seconds["llama-bench"])
    print("  ratio to llama-bench (tok/s, medians): " + ", ".join(
        f"{n} {bench_med / statistics.median(seconds[n]):.3f}" for n in LAYERS[1:]))
    ctx.close()
    model.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
