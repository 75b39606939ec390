"""The lab on a GPU machine, with what the device runs need beside it:

- ``synthetic:`` model references resolve (lab_llamacpp.synthetic), until
  the model registry registers them itself;
- ``LAB_DRAFT_GPU_LAYERS`` offloads draft models (the draft-model drafter
  loads them with the engine's default of no GPU layers);
- ``LAB_GPU_PICK=1`` makes the in-process backend pick greedy tokens on
  the GPU (lab_llamacpp.gpu_pick) instead of arg-maxing host logits;
- GPU telemetry (lab.gpu) sampled through a run, written as gpu.json with
  each cell's energy per token split into draft and verify.

    python scripts/device/lab_device.py run PROFILE --out DIR [--probe FILE]
    python scripts/device/lab_device.py probe --model M --widths 1-32 --out FILE
    python scripts/device/lab_device.py overhead --model M [--repeats 3] [--tokens 256]
    python scripts/device/lab_device.py report RUN_DIR
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any


def patch_lab() -> None:
    from lab_llamacpp import synthetic

    from lab import models

    plain = models.resolve

    def resolve(ref: str) -> Path:
        if ref.startswith(synthetic.PREFIX):
            return synthetic.resolve(ref)
        return plain(ref)

    models.resolve = resolve  # type: ignore[assignment]

    draft_ngl = int(os.environ.get("LAB_DRAFT_GPU_LAYERS", "0"))
    if draft_ngl:
        from lab_llamacpp import engine

        init = engine.Model.__init__

        def offloaded(self: Any, path: str, n_gpu_layers: int = 0, extra_bufts: bool = True) -> None:
            init(self, path, n_gpu_layers or draft_ngl, extra_bufts)

        engine.Model.__init__ = offloaded  # type: ignore[method-assign]

    if os.environ.get("LAB_GPU_PICK") == "1":
        from lab_llamacpp import backend, engine, gpu_pick

        backend.LlamaTarget = gpu_pick.GpuPickTarget  # type: ignore[misc]
        make_context = engine.Context.__init__

        def with_outputs(self: Any, *args: Any, **kwargs: Any) -> None:
            with gpu_pick.outputs_per_seq():
                make_context(self, *args, **kwargs)

        engine.Context.__init__ = with_outputs  # type: ignore[method-assign]


def gpu_listener(samples_out: list[Any]) -> tuple[Any, Any]:
    """A sampler and a listener that keeps each cell's generation window
    and step phases."""
    from lab import gpu
    from lab.events import Finished, StepEvent, TokenEvent

    reader = gpu.open_reader()
    sampler = gpu.GpuSampler(reader, interval=0.02) if reader is not None else None
    cells: dict[tuple[str, str, int], dict[str, Any]] = {}

    def listen(event: Any) -> None:
        cell = getattr(event, "cell", None)
        if cell is None or getattr(cell, "is_warmup", False) or not getattr(cell, "prompt", ""):
            return
        key = (cell.arm, cell.prompt, cell.round)
        c = cells.setdefault(key, {"first_token_t": None, "end_t": None, "steps": [], "n_tokens": 0})
        if isinstance(event, TokenEvent):
            if c["first_token_t"] is None:
                c["first_token_t"] = event.t
            c["n_tokens"] += len(event.ids)
        elif isinstance(event, StepEvent):
            c["steps"].append(gpu.StepPhases.of_step(event.t, event.step_s, event.draft_s, event.verify_s))
        elif isinstance(event, Finished):
            c["end_t"] = event.t

    samples_out.append(cells)
    return sampler, listen


def energy_table(sampler: Any, cells: dict[tuple[str, str, int], dict[str, Any]]) -> dict[str, Any]:
    from lab import gpu

    samples = sampler.snapshot()
    rows = []
    for (arm, prompt, rnd), c in sorted(cells.items()):
        if c["first_token_t"] is None or c["end_t"] is None:
            continue
        # The first token closes prompt processing; generation is the rest.
        e = gpu.generation_energy(samples, c["first_token_t"], c["end_t"], max(c["n_tokens"] - 1, 0), c["steps"])
        row = {"arm": arm, "prompt": prompt, "round": rnd, **e.to_json()}
        if e.draft_j is not None and e.verify_j is not None and e.draft_j + e.verify_j > 1.02 * e.joules:
            # Phases that overlap were not timed as they ran (a server's
            # steps come from its log afterwards): no split for them.
            row["draft_energy_j"] = row["verify_energy_j"] = None
        rows.append(row)
    by_arm: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_arm.setdefault(r["arm"], []).append(r)
    summary = {}
    for arm, rs in by_arm.items():
        jpt = [r["energy_per_token_j"] for r in rs if r["energy_per_token_j"] is not None]
        watts = [r["mean_power_w"] for r in rs if r["mean_power_w"] is not None]
        summary[arm] = {
            "energy_per_token_j": [min(jpt), statistics.median(jpt), max(jpt)] if jpt else None,
            "mean_power_w": statistics.median(watts) if watts else None,
            "draft_share": _share(rs, "draft_energy_j"), "verify_share": _share(rs, "verify_energy_j"),
        }
    peak = sampler.peak_used_bytes()
    return {
        "source": sampler.reader.source, "interval_s": sampler.interval, "samples": len(samples),
        "gpu": samples[0].name if samples else None, "peak_used_bytes": peak, "per_arm": summary, "cells": rows,
    }


def save_samples(samples: list[Any], path: Path) -> None:
    """The raw readings, column-wise (t on the run's perf_counter clock)."""
    import gzip

    cols = {
        "t": [s.t for s in samples], "memory_used_bytes": [s.memory_used_bytes for s in samples],
        "utilization_pct": [s.utilization_pct for s in samples], "power_w": [s.power_w for s in samples],
        "energy_j": [s.energy_j for s in samples],
        "process_bytes": [{str(k): v for k, v in s.process_bytes.items()} for s in samples],
    }
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        json.dump(cols, fh)


def _share(rows: list[dict[str, Any]], key: str) -> float | None:
    total = sum(r["energy_j"] for r in rows)
    part = [r[key] for r in rows if r[key] is not None]
    return sum(part) / total if part and total > 0 else None


def cmd_run(args: argparse.Namespace) -> int:
    from lab.cli import Progress, _table
    from lab.plugins import load_registry
    from lab.profiles import load_profile
    from lab.runner import Runner
    from lab.store import RunStore

    registry = load_registry()
    if registry.errors:
        print(f"plugin load errors: {registry.errors}", file=sys.stderr)
    profile = load_profile(args.profile, registry)
    store = RunStore(profile, args.out)
    if args.probe:
        shutil.copy(args.probe, store.path / "probe.json")
    holder: list[Any] = []
    sampler, listen = gpu_listener(holder)
    runner = Runner(profile, registry, store, [Progress(sys.stderr), listen])
    if sampler is not None:
        sampler.start()
    try:
        results = runner.run()
    finally:
        if sampler is not None:
            sampler.stop()
    if sampler is not None:
        (store.path / "gpu.json").write_text(json.dumps(energy_table(sampler, holder[0]), indent=1) + "\n")
        save_samples(sampler.snapshot(), store.path / "gpu-samples.json.gz")
    print(_table(results))
    print(f"\nsaved: {store.path}")
    return 0


def consecutive_pass_seconds(ctx: Any, widths: tuple[int, ...], inner: int = 9) -> list[float]:
    """lab_llamacpp.probe.decode_pass_seconds with each width's passes run
    back to back instead of interleaved. llama.cpp's CUDA backend replays a
    captured CUDA graph while consecutive decodes keep one shape, as a
    baseline's one-row decodes and a sweep's equal-width verifies do; passes
    that change width every time rebuild it and run slower by up to a
    millisecond, most of a one-row pass."""
    import time

    from lab_llamacpp.probe import _PREFIX_TEXT, PREFIX_TOKENS

    model = ctx.model
    prefix = model.tokenize(_PREFIX_TEXT * 8)[:PREFIX_TOKENS]
    rows = model.tokenize(_PREFIX_TEXT * 4, add_special=False)
    ctx.reset()
    ctx.decode(prefix, "last")
    base = ctx.n_past
    out = []
    for w in widths:
        times = []
        for i in range(inner + 2):
            t0 = time.perf_counter()
            ctx.decode(rows[:w], "all")
            if i >= 2:  # the first passes of a new shape allocate and capture
                times.append(time.perf_counter() - t0)
            ctx.truncate(base)
        out.append(statistics.median(times))
    ctx.reset()
    return out


def cmd_probe(args: argparse.Namespace) -> int:
    from lab import probe

    widths = probe.parse_widths(args.widths)
    if args.consecutive:
        from lab_llamacpp.backend import LlamaCppBackend

        def measure(self: Any, ws: Any, method: str | None = None) -> list[float]:
            self._probe_notes = {"prefix_tokens": 128, "inner_passes": 9, "order": "consecutive per width"}
            return consecutive_pass_seconds(self.context, tuple(ws))

        LlamaCppBackend.measure_verify_cost = measure  # type: ignore[method-assign]
    result = probe.measure(
        "llamacpp", args.model, widths, repeats=args.repeats, options={"n_gpu_layers": args.n_gpu_layers},
        bandwidth=False, progress=lambda m: print(f"  {m}", file=sys.stderr, flush=True),
    )
    if args.consecutive:
        from dataclasses import replace

        result = replace(result, method="decode-consecutive")
    print(result.render())
    print(f"saved: {probe.save(result, args.out)}")
    return 0


OVERHEAD_PROFILE = """
[run]
max_tokens = {tokens}
rounds = 1
warmup = 1
n_ctx = 2048
chat_template = false
ignore_eos = true

[[prompts]]
name = "p"
text = "The lighthouse keeper climbed the stairs"

[[arms]]
name = "base"
backend = "llamacpp"
model = "{model}"
options = {{ n_gpu_layers = {ngl} }}

[[arms]]
name = "oracle"
backend = "llamacpp"
model = "{model}"
drafter = "oracle"
n_max = {n_max}
options = {{ n_gpu_layers = {ngl} }}
"""


def llama_bench_tg(model: Path, tokens: int, ngl: int) -> float:
    out = subprocess.run(
        ["llama-bench", "-m", str(model), "-p", "0", "-n", str(tokens), "-ngl", str(ngl), "-r", "3", "-o", "json"],
        capture_output=True, text=True, check=True,
    )
    return float(json.loads(out.stdout)[0]["avg_ts"])


def cmd_overhead(args: argparse.Namespace) -> int:
    """benchmarks/decode_overhead.py's two figures with the model offloaded:
    lab baseline tok/s over llama-bench tg, and the speculative loop's own
    time per step (neither engine decode nor drafting)."""
    from lab import models
    from lab.plugins import load_registry
    from lab.profiles import parse_profile
    from lab.runner import Runner

    path = models.resolve(args.model)
    registry = load_registry()
    text = OVERHEAD_PROFILE.format(tokens=args.tokens, model=args.model, ngl=args.n_gpu_layers, n_max=args.n_max)
    ratios, overheads, lab_tps, bench_tps = [], [], [], []
    for i in range(args.repeats):
        b = llama_bench_tg(path, args.tokens, args.n_gpu_layers)
        rows = Runner(parse_profile(text, "overhead.toml", registry), registry).run()
        base = next(r for r in rows if r["arm"] == "base")
        oracle = next(r for r in rows if r["arm"] == "oracle")
        if base["status"] != "ok" or oracle["status"] != "ok":
            print(f"failed: {base.get('detail')} {oracle.get('detail')}", file=sys.stderr)
            return 1
        o_us = oracle["engine_report"]["loop_overhead_s"] / max(oracle["steps"], 1) * 1e6
        lab_tps.append(base["tok_per_s"])
        bench_tps.append(b)
        ratios.append(base["tok_per_s"] / b)
        overheads.append(o_us)
        print(
            f"repeat {i + 1}: llama-bench tg{args.tokens} {b:.1f} tok/s, lab baseline {base['tok_per_s']:.1f} tok/s, "
            f"ratio {ratios[-1]:.3f}, oracle n_max {args.n_max} {oracle['tok_per_s']:.1f} tok/s "
            f"(acceptance {oracle['acceptance_rate']:.2f}), loop overhead {o_us:.0f} us/step",
            flush=True,
        )

    def spread(xs: list[float], fmt: str = ".3f") -> str:
        return f"min {min(xs):{fmt}} / median {statistics.median(xs):{fmt}} / max {max(xs):{fmt}}"

    pick = "GPU (backend sampler)" if os.environ.get("LAB_GPU_PICK") == "1" else "host (numpy arg-max)"
    print(f"model {args.model}, n_gpu_layers {args.n_gpu_layers}, {args.tokens} tokens, greedy pick on the {pick}")
    print(f"llama-bench tg tok/s:      {spread(bench_tps, '.1f')}")
    print(f"lab baseline tok/s:        {spread(lab_tps, '.1f')}")
    print(f"lab / llama-bench ratio:   {spread(ratios)}")
    print(f"speculative loop overhead: {spread(overheads, '.0f')} us per step (n_max {args.n_max}, oracle)")
    return 0


def _median_s(fn: Any, n: int) -> float:
    import time

    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def cmd_step_costs(args: argparse.Namespace) -> int:
    """Where a verify step's time goes on the host: one llama_decode of w
    rows with every row's logits, each row's greedy pick, the rollback; once
    with host picks (logits copied, numpy arg-max), once with the backend
    sampler (arg-max in the graph, no logits copied)."""
    from lab_llamacpp import engine
    from lab_llamacpp.gpu_pick import BackendGreedy, outputs_per_seq

    from lab import models

    model = engine.Model(str(models.resolve(args.model)), n_gpu_layers=args.n_gpu_layers)
    with outputs_per_seq():
        ctx = engine.Context(model, 2048, 512, len(os.sched_getaffinity(0)))
    text = "The lighthouse keeper climbed the spiral stairs every evening at dusk and wrote the weather. " * 40
    prefix = model.tokenize(text)[: args.depth]
    rows = model.tokenize(text, add_special=False)[:32]
    masked = model.eog_ids
    print(f"model {args.model}, depth {len(prefix)}, vocab {model.n_vocab}; medians of {args.n} in microseconds")
    print(f"{'pick':>5} {'w':>3} {'decode':>9} {'picks':>8} {'per pick':>9} {'rollback':>9} {'step':>9}")
    for mode in ("host", "gpu"):
        greedy = BackendGreedy(ctx, masked) if mode == "gpu" else None
        ctx.reset()
        ctx.decode(prefix, "last")
        base = ctx.n_past
        for w in (1, 2, 5, 9, 17):
            def decode(w: int = w, base: int = base) -> None:
                ctx.decode(rows[:w], "all")
                ctx.truncate(base)

            def picks(w: int = w, greedy: Any = greedy) -> list[int]:
                if greedy is not None:
                    return [greedy.pick(i) for i in range(w)]
                return [ctx.argmax(i, masked) for i in range(w)]

            def rollback(w: int = w, base: int = base) -> None:
                # The removal call's own cost: nothing is left past base after
                # the first, so later calls find an empty range.
                ctx.truncate(base)
                ctx.n_past = base + w

            for _ in range(3):
                decode()
            t_dec = _median_s(decode, args.n)
            ctx.decode(rows[:w], "all")
            t_pick = _median_s(picks, args.n)
            t_trunc = _median_s(rollback, args.n)
            ctx.truncate(base)
            total = t_dec + t_pick + t_trunc
            print(f"{mode:>5} {w:>3} {t_dec * 1e6:>9.0f} {t_pick * 1e6:>8.1f} {t_pick / w * 1e6:>9.1f} "
                  f"{t_trunc * 1e6:>9.1f} {total * 1e6:>9.0f}", flush=True)
        if greedy is not None:
            greedy.detach()
    ctx.close()
    model.close()
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from lab.report import load_for_report, render_markdown

    sys.stdout.write(render_markdown(load_for_report(args.run_dir)))
    return 0


def main() -> int:
    # llama.cpp before numpy: on the device image numpy's BLAS brings its own
    # OpenMP runtime, and a ggml CPU backend loaded after it crashed at model
    # load (a process that imported llama_cpp first loaded the same model).
    import llama_cpp  # noqa: F401

    patch_lab()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("run")
    p.add_argument("profile")
    p.add_argument("--out", required=True)
    p.add_argument("--probe", help="probe.json to put in the run directory before the report is written")
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("probe")
    p.add_argument("--model", required=True)
    p.add_argument("--widths", default="1-32")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--n-gpu-layers", type=int, default=999)
    p.add_argument("--consecutive", action="store_true", help="time each width's passes back to back")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_probe)
    p = sub.add_parser("overhead")
    p.add_argument("--model", required=True)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--n-max", type=int, default=4)
    p.add_argument("--n-gpu-layers", type=int, default=999)
    p.set_defaults(func=cmd_overhead)
    p = sub.add_parser("step-costs")
    p.add_argument("--model", required=True)
    p.add_argument("--depth", type=int, default=512)
    p.add_argument("--n", type=int, default=30)
    p.add_argument("--n-gpu-layers", type=int, default=999)
    p.set_defaults(func=cmd_step_costs)
    p = sub.add_parser("report")
    p.add_argument("run_dir")
    p.set_defaults(func=cmd_report)
    args = ap.parse_args()
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
