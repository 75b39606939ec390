"""How close the lab's in-process llama.cpp loop runs to the engine itself.

In one run, same model, same threads, alternating so that machine noise hits
both sides alike (which side goes first alternates too, so a GPU's clocks
drifting over the run favour neither):
  1. lab baseline decodes per second (generation phase: n - 1 decodes, the
     first token came with the prompt) / llama-bench tg tok/s. Goal >= 0.95.
  2. the speculative loop's per-step Python overhead in microseconds: time in
     the loop that is neither engine decode nor drafting, per step (oracle
     drafter, so every step is a full n_max block).

    python -m benchmarks.decode_overhead [--repeats 5] [--tokens 128] [--model embedded:smollm2]
                                         [--batch-invariant on|off] [--n-gpu-layers N]
                                         [--gpu-pick auto|on|off[,...]] [--n-max 4]
                                         [--variants process|fresh|bare|nogc[,...]] [--split] [--settle S]

``--variants`` says how each lab side runs: ``fresh`` (the default) in a
new process per run, its arms each in a process of their own, exactly as
``lab run`` runs a profile (and as llama-bench runs its own): like against
like; ``shared`` the same with ``LAB_ARM_PROCESS=shared`` (the arms in the
lab's process: what the arm's own process and its event pipe cost);
``process`` in this process, one run after another, arms in the lab's
process; ``bare`` as ``process`` with the run's sampler threads (memory,
contention, GPU telemetry) not started; ``nogc`` as ``process`` with
Python's cyclic garbage collector off for the run. Several give every
setting one side per variant in each repeat, side by side.

Each lab side's ratios are also given apart by what ran on the GPU just
before: llama-bench (whose own timed run always follows its warmup run) or
another lab run. On the H200 a ``process`` baseline that directly followed
another lab run of this process ran its device part about 4 % slower; one
in a fresh process never did (results/lab-cost-h200/).

``--split`` also splits each lab baseline token into
llama_decode's host work, the device's part, the pick and the loop's own
Python (benchmarks/token_split.py), beside llama-bench's token.

``--batch-invariant on`` pads every lone token to two rows so greedy
speculation stays token-identical to the baseline; ``off`` (the backend's
default) runs llama.cpp's one-row kernels, as llama-bench does: the two
ratios show what bit-exact comparison costs on this machine.

On a GPU (``--n-gpu-layers 999``) the arms pick greedy tokens with
llama.cpp's backend sampler unless ``--gpu-pick off`` (the backend's
``gpu_pick`` option): the two runs show what copying logits to the host
and arg-maxing them there costs a step. Goals there: ratio >= 0.97 and a
loop overhead <= 100 us per step.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Iterator

from benchmarks.common import ROOT, arms_in_this_process, last_json_line
from benchmarks.common import spread as _spread
from benchmarks.token_split import split_clocks
from lab.base.events import ArmReported, TokenEvent, now
from lab.kit import models
from lab.profile.load import parse_profile
from lab.registry import load_registry
from lab.runner import Runner


def llama_bench_path() -> Path:
    from lab.kit.llama_tools import find_llama_tool, missing_tool_hint

    found = find_llama_tool("llama-bench")
    if not found:
        sys.exit(missing_tool_hint("llama-bench"))
    return Path(found[0])


def llama_bench_tg(bench: Path, model: Path, tokens: int, threads: int, n_gpu_layers: int = 0) -> float:
    from lab.kit.llama_tools import BenchFailed, bench_tg_argv, run_bench_tg

    try:
        row = run_bench_tg(bench_tg_argv(str(bench), str(model), tokens, threads, n_gpu_layers=n_gpu_layers))
    except BenchFailed as exc:
        sys.exit(str(exc))
    return float(row["avg_ts"])


def bench_profile(model: str, tokens: int, threads: int, ngl: int = 0, pick: str = "auto", invariant: bool = False,
                  n_ctx: int = 2048, oracle_n_max: int | None = None) -> str:
    """A one-prompt profile: the baseline arm, and an oracle arm when
    ``oracle_n_max`` is given. No probe: only the arms' own decoding counts."""
    options = (f'options = {{ batch_invariant = {str(invariant).lower()}, n_gpu_layers = {ngl}, '
               f'gpu_pick = "{pick}" }}')
    text = (f"[run]\nallow_outside_paths = true\nmax_tokens = {tokens}\nrounds = 1\nwarmup = 1\nthreads = {threads}\nn_ctx = {n_ctx}\n"
            'chat_template = false\nignore_eos = true\nprobe = false\n\n[[prompts]]\nname = "p"\ntext = "The"\n\n'
            f'[[arms]]\nname = "base"\nbackend = "llamacpp"\nmodel = "{model}"\n{options}\n')
    if oracle_n_max is not None:
        text += (f'\n[[arms]]\nname = "oracle"\nbackend = "llamacpp"\nmodel = "{model}"\ndrafter = "oracle"\n'
                 f"n_max = {oracle_n_max}\n{options}\n")
    return text


@contextmanager
def samplers_off() -> Iterator[None]:
    """Runs in this block start no sampler thread and open no GPU telemetry."""
    from lab.base import periodic as sampling
    from lab.telemetry import gpu

    start, stop, opened = sampling.PeriodicSampler.start, sampling.PeriodicSampler.stop, gpu.RunTelemetry.open
    sampling.PeriodicSampler.start = lambda self: self  # type: ignore[method-assign]
    sampling.PeriodicSampler.stop = lambda self: None  # type: ignore[method-assign]
    gpu.RunTelemetry.open = classmethod(lambda cls, emit=None: None)  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        sampling.PeriodicSampler.start, sampling.PeriodicSampler.stop = start, stop  # type: ignore[method-assign]
        gpu.RunTelemetry.open = opened  # type: ignore[method-assign]


VARIANTS = ("process", "fresh", "shared", "bare", "nogc")


def lab_side(variant: str, model: str, tokens: int, threads: int, invariant: bool, ngl: int, pick: str,
             n_max: int, split: bool = False) -> tuple[float, float, dict[str, bool], dict[str, float] | None]:
    """One lab run as ``variant`` runs it (see the module's notes), with its
    baseline token's split when ``split`` (token_split.py)."""
    if variant in ("fresh", "shared"):
        env = {**os.environ, "LAB_ARM_PROCESS": "shared" if variant == "shared" else ""}
        out = subprocess.run(
            [sys.executable, "-m", "benchmarks.decode_overhead", "--one-run", "--model", model, "--tokens",
             str(tokens), "--threads", str(threads), "--batch-invariant", "on" if invariant else "off",
             "--n-gpu-layers", str(ngl), "--gpu-pick", pick, "--n-max", str(n_max), *(["--split"] if split else [])],
            capture_output=True, text=True, cwd=ROOT, env=env,
        )
        if out.returncode != 0:
            sys.exit(f"the lab run in a fresh process failed ({out.returncode}): {out.stderr[-2000:]}")
        sys.stderr.writelines(line + "\n" for line in out.stderr.splitlines() if line.startswith("timeline"))
        got = last_json_line(out.stdout)
        return (float(got["rate"]), float(got["overhead_us"]), {k: bool(v) for k, v in got["picks"].items()},
                got.get("split"))
    with arms_in_this_process(), split_clocks() if split else nullcontext() as clocks:
        if variant == "bare":
            with samplers_off():
                rate, over, picks = lab_run(model, tokens, threads, invariant, ngl, pick, n_max)
        elif variant == "nogc":
            gc.collect()
            gc.disable()
            try:
                rate, over, picks = lab_run(model, tokens, threads, invariant, ngl, pick, n_max)
            finally:
                gc.enable()
        else:
            rate, over, picks = lab_run(model, tokens, threads, invariant, ngl, pick, n_max)
    return rate, over, picks, clocks.baseline if clocks is not None else None


def lab_run(model: str, tokens: int, threads: int, invariant: bool, ngl: int = 0, pick: str = "auto",
            n_max: int = 4) -> tuple[float, float, dict[str, bool]]:
    registry = load_registry()
    text = bench_profile(model, tokens, threads, ngl, pick, invariant, oracle_n_max=n_max)
    profile = parse_profile(text, "bench.toml", registry)
    reports: dict[str, dict] = {}
    base_tokens: list[float] = []  # when the baseline's measured tokens landed (lab.base.events.now)

    def listen(event: object) -> None:
        if isinstance(event, ArmReported):
            reports[event.arm] = dict(event.report)
        elif isinstance(event, TokenEvent) and event.cell.arm == "base" and not event.cell.is_warmup:
            base_tokens.append(event.t)

    rows = Runner(profile, registry, listeners=[listen]).run()
    if base_tokens:
        wall = time.time() - now()
        print(f"timeline base tokens: {base_tokens[0] + wall:.3f} {base_tokens[-1] + wall:.3f}", file=sys.stderr,
              flush=True)
    base = next(r for r in rows if r["arm"] == "base")
    oracle = next(r for r in rows if r["arm"] == "oracle")
    if base["status"] != "ok" or oracle["status"] != "ok":
        sys.exit(f"lab run failed: {base['detail']} {oracle['detail']}")
    overhead_us = oracle["engine_report"]["loop_overhead_s"] / max(oracle["steps"], 1) * 1e6
    picks = {arm: bool(reports.get(arm, {}).get("gpu_pick")) for arm in ("base", "oracle")}
    # Decodes per second, as llama-bench's tg counts them: a row's tok_per_s
    # puts all n tokens over the generation phase, whose clock starts after
    # the first (picked from the prompt's decode), so n - 1 decodes ran in it.
    decode_rate = (base["n_tokens"] - 1) / base["gen_s"]
    return decode_rate, overhead_us, picks


def spread(xs: list[float], fmt: str = ".2f") -> str:
    return _spread(xs, fmt, sep=" / ")


def pick_settings(text: str) -> list[str]:
    settings = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in settings if t not in ("auto", "on", "off")]
    if bad or not settings or len(set(settings)) != len(settings):
        raise argparse.ArgumentTypeError(f"expected distinct values of auto, on, off separated by commas, got {text!r}")
    return settings


def pick_words(picks: dict[str, bool]) -> str:
    return ", ".join(f"{arm} {'by the backend sampler' if on else 'on the host (numpy arg-max)'}"
                     for arm, on in picks.items())


def variant_list(text: str) -> list[str]:
    got = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in got if t not in VARIANTS]
    if bad or not got or len(set(got)) != len(got):
        raise argparse.ArgumentTypeError(f"expected distinct values of {', '.join(VARIANTS)} separated by commas, "
                                         f"got {text!r}")
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--model", default="embedded:smollm2")
    ap.add_argument("--threads", type=int, default=0, help="0: as many as the CPUs this process may use")
    ap.add_argument("--batch-invariant", choices=("on", "off"), default="off",
                    help="pad lone tokens to two rows (bit-exact greedy speculation) or not (the backend's default)")
    ap.add_argument("--n-gpu-layers", type=int, default=0, help="layers offloaded, for the lab and llama-bench (-ngl)")
    ap.add_argument("--gpu-pick", type=pick_settings, default=["auto"],
                    help="greedy picks by llama.cpp's backend sampler (the llamacpp option gpu_pick): auto, on or "
                         "off, or several separated by commas (each a lab side of every repeat, in rotating order)")
    ap.add_argument("--n-max", type=int, default=4, help="the oracle arm's draft length")
    ap.add_argument("--variants", type=variant_list, default=["fresh"],
                    help="how each lab side runs: fresh, shared, process, bare or nogc, or several separated by commas")
    ap.add_argument("--settle", type=float, default=0.0,
                    help="seconds to wait before each side (the GPU idle): whether what slows a lab run that follows "
                         "another fades with time")
    ap.add_argument("--split", action="store_true",
                    help="split each lab baseline token into launch, device, pick and loop (token_split.py)")
    ap.add_argument("--one-run", action="store_true",
                    help="(for --variants fresh) one lab run of the first --gpu-pick setting, printed as JSON")
    args = ap.parse_args()
    load_registry()  # model references (tiny:, synthetic:) resolve through the plugins' registry
    threads = args.threads or len(os.sched_getaffinity(0))
    if args.one_run:
        # where the arms run is this process's LAB_ARM_PROCESS (the default: each its own); a split is
        # clocked in this process, so it keeps them here
        with split_clocks() if args.split else nullcontext() as clocks:
            rate, over, picked = lab_run(args.model, args.tokens, threads, args.batch_invariant == "on",
                                         args.n_gpu_layers, args.gpu_pick[0], args.n_max)
        split = clocks.baseline if clocks is not None else None
        print(json.dumps({"rate": rate, "overhead_us": over, "picks": picked, "split": split}))
        return 0
    model_path = models.resolve(args.model)
    bench = llama_bench_path()
    labs = [(pick, variant) for pick in args.gpu_pick for variant in args.variants]

    def label(side: tuple[str, str]) -> str:
        words = [f"gpu_pick {side[0]}"] if len(args.gpu_pick) > 1 else []
        words += [side[1]] if len(args.variants) > 1 else []
        return ", ".join(words)

    bench_tps: list[float] = []
    lab_tps: dict[tuple[str, str], list[float]] = {side: [] for side in labs}
    overhead: dict[tuple[str, str], list[float]] = {side: [] for side in labs}
    ratios: dict[tuple[str, str], list[float]] = {side: [] for side in labs}
    picks: dict[tuple[str, str], dict[str, bool]] = {}
    splits: dict[tuple[str, str], list[dict[str, float]]] = {side: [] for side in labs}
    sides: list[tuple[str, str] | None] = [None, *labs]  # None: llama-bench
    # what ran on the GPU just before each lab run: llama-bench, another lab run, or nothing
    after: dict[tuple[str, str], list[str]] = {side: [] for side in labs}
    previous = "nothing"
    for i in range(args.repeats):
        # each side goes first in turn, so a GPU's clocks drifting over the run favour none
        order = sides[i % len(sides):] + sides[: i % len(sides)]
        got: dict[tuple[str, str], tuple[float, float, dict[str, float] | None]] = {}
        b = 0.0
        for side in order:
            if args.settle > 0:
                time.sleep(args.settle)
            start = time.time()
            if side is None:
                b = llama_bench_tg(bench, model_path, args.tokens, threads, args.n_gpu_layers)
            else:
                tps, over, picks[side], split = lab_side(side[1], args.model, args.tokens, threads,
                                                         args.batch_invariant == "on", args.n_gpu_layers, side[0],
                                                         args.n_max, args.split)
                got[side] = (tps, over, split)
                after[side].append(previous)
            previous = "llama-bench" if side is None else "lab"
            # wall-clock spans, to line a side up with the card's clocks (nvidia-smi's timestamps)
            print(f"timeline repeat {i + 1} {'llama-bench' if side is None else label(side) or 'lab'}: "
                  f"{start:.3f} {time.time():.3f}", file=sys.stderr, flush=True)
        bench_tps.append(b)
        parts = [f"llama-bench tg{args.tokens} {b:.1f} tok/s"]
        for side in labs:
            t, o, split = got[side]
            lab_tps[side].append(t)
            overhead[side].append(o)
            ratios[side].append(t / b)
            tag = f" ({label(side)})" if label(side) else ""
            parts.append(f"lab baseline{tag} {t:.1f} tok/s, ratio {t / b:.3f}, loop overhead {o:.0f} us/step")
        for side in labs:
            split = got[side][2]
            if split is not None:
                splits[side].append(split)
                tag = f" ({label(side)})" if label(side) else ""
                parts.append(f"split{tag}: " + ", ".join(f"{k} {v:.1f}" for k, v in split.items()) + " us")
        first = "llama-bench" if order[0] is None else (label(order[0]) or "lab")
        print(f"repeat {i + 1} ({first} first): " + ", ".join(parts), flush=True)
    print()
    log = "on, through Python to stderr (LAB_LLAMA_VERBOSE=1)" if os.environ.get("LAB_LLAMA_VERBOSE") == "1" else "quiet"
    print(f"model {args.model} ({model_path.name}), {threads} threads, {args.tokens} tokens, {args.repeats} repeats, "
          f"batch invariant {args.batch_invariant}, n_gpu_layers {args.n_gpu_layers}, llama.cpp log {log}")
    print(f"llama-bench tg tok/s:      {spread(bench_tps)}")
    goal = "0.97 on a GPU" if args.n_gpu_layers else "0.95"
    for side in labs:
        if len(labs) > 1:
            print(f"-- {label(side)}")
        print(f"greedy picks: {pick_words(picks[side])}")
        print(f"lab baseline tok/s:        {spread(lab_tps[side])}")
        print(f"lab / llama-bench ratio:   {spread(ratios[side], '.3f')}   (goal >= {goal})")
        for before, words in (("llama-bench", "right after llama-bench"), ("lab", "right after a lab run")):
            some = [r for r, b in zip(ratios[side], after[side]) if b == before]
            if some and len(some) < len(ratios[side]):
                print(f"  {words + ':':<24} {spread(some, '.3f')}   ({len(some)} of {len(ratios[side])} runs)")
        print(f"speculative loop overhead: {spread(overhead[side], '.0f')} us per step (n_max {args.n_max}, oracle drafter)")
        if splits[side]:
            print("baseline token, us (llama-bench's: " + spread([1e6 / b for b in bench_tps], ".1f") + ")")
            for part in splits[side][0]:
                print(f"  {part:<7} {spread([s[part] for s in splits[side]], '.1f')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
