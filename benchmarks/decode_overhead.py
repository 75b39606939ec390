"""How close the lab's in-process llama.cpp loop runs to the engine itself.

In one run, same model, same threads, alternating so that machine noise hits
both sides alike:
  1. lab baseline tok/s (generation phase) / llama-bench tg tok/s. Goal >= 0.95.
  2. the speculative loop's per-step Python overhead in microseconds: time in
     the loop that is neither engine decode nor drafting, per step (oracle
     drafter, so every step is a full n_max block).

    python benchmarks/decode_overhead.py [--repeats 5] [--tokens 128] [--model embedded:smollm2]
                                         [--batch-invariant on|off]

``--batch-invariant on`` pads every lone token to two rows so greedy
speculation stays token-identical to the baseline; ``off`` (the backend's
default) runs llama.cpp's one-row kernels, as llama-bench does: the two
ratios show what bit-exact comparison costs on this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from lab import models
from lab.plugins import load_registry
from lab.profiles import parse_profile
from lab.runner import Runner


def llama_bench_path() -> Path:
    from lab_llamacpp.tools import find_llama_tool

    found = find_llama_tool("llama-bench")
    if not found:
        from lab_llamacpp.build import missing_tool_hint

        sys.exit(missing_tool_hint("llama-bench"))
    return Path(found[0])


def llama_bench_tg(bench: Path, model: Path, tokens: int, threads: int) -> float:
    out = subprocess.run(
        [str(bench), "-m", str(model), "-p", "0", "-n", str(tokens), "-t", str(threads), "-r", "1", "-o", "json"],
        capture_output=True, text=True, check=True,
    )
    rows = json.loads(out.stdout)
    return float(rows[0]["avg_ts"])


PROFILE = """
[run]
max_tokens = {tokens}
rounds = 1
warmup = 1
threads = {threads}
n_ctx = 2048
chat_template = false

[[prompts]]
name = "p"
text = "The"

[[arms]]
name = "base"
backend = "llamacpp"
model = "{model}"
options = {{ batch_invariant = {invariant} }}

[[arms]]
name = "oracle"
backend = "llamacpp"
model = "{model}"
drafter = "oracle"
n_max = 4
options = {{ batch_invariant = {invariant} }}
"""


def lab_run(model: str, tokens: int, threads: int, invariant: bool) -> tuple[float, float]:
    registry = load_registry()
    text = PROFILE.format(tokens=tokens, threads=threads, model=model, invariant=str(invariant).lower())
    profile = parse_profile(text, "bench.toml", registry)
    rows = Runner(profile, registry).run()
    base = next(r for r in rows if r["arm"] == "base")
    oracle = next(r for r in rows if r["arm"] == "oracle")
    if base["status"] != "ok" or oracle["status"] != "ok":
        sys.exit(f"lab run failed: {base['detail']} {oracle['detail']}")
    overhead_us = oracle["engine_report"]["loop_overhead_s"] / max(oracle["steps"], 1) * 1e6
    return base["tok_per_s"], overhead_us


def spread(xs: list[float]) -> str:
    return f"min {min(xs):.2f} / median {statistics.median(xs):.2f} / max {max(xs):.2f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--model", default="embedded:smollm2")
    ap.add_argument("--threads", type=int, default=0, help="0: as many as the CPUs this process may use")
    ap.add_argument("--batch-invariant", choices=("on", "off"), default="off",
                    help="pad lone tokens to two rows (bit-exact greedy speculation) or not (the backend's default)")
    args = ap.parse_args()
    threads = args.threads or len(os.sched_getaffinity(0))
    model_path = models.resolve(args.model)
    bench = llama_bench_path()
    lab_tps: list[float] = []
    bench_tps: list[float] = []
    overhead: list[float] = []
    ratios: list[float] = []
    for i in range(args.repeats):
        b = llama_bench_tg(bench, model_path, args.tokens, threads)
        t, o = lab_run(args.model, args.tokens, threads, args.batch_invariant == "on")
        bench_tps.append(b)
        lab_tps.append(t)
        overhead.append(o)
        ratios.append(t / b)
        print(f"repeat {i + 1}: llama-bench tg{args.tokens} {b:.1f} tok/s, lab baseline {t:.1f} tok/s, ratio {t / b:.3f}, loop overhead {o:.0f} us/step", flush=True)
    print()
    print(f"model {args.model} ({model_path.name}), {threads} threads, {args.tokens} tokens, {args.repeats} repeats, "
          f"batch invariant {args.batch_invariant}")
    print(f"llama-bench tg tok/s:      {spread(bench_tps)}")
    print(f"lab baseline tok/s:        {spread(lab_tps)}")
    print(f"lab / llama-bench ratio:   {spread(ratios)}   (goal >= 0.95)")
    print(f"speculative loop overhead: {spread(overhead)} us per step (n_max 4, oracle drafter)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
