"""How much the TUI can render, and what it costs a run.

1. Render throughput: producer threads stream tokens as fast as they can
   (or at a set rate) into 4 lanes through the same bridge the runner
   feeds; the app runs headless with a real compositor. Reported: tokens
   per second that reached the lanes, and event-loop lag (an asyncio probe
   that sleeps 10 ms and records how late it wakes). A rate counts as
   sustained when every token offered was rendered and p99 lag < 50 ms.
   Goal: >= 5,000 tok/s sustained.
2. UI cost: one lane streaming at an engine's pace; the UI thread's CPU
   time as a share of one core, idle, at the full cadence and at the lean
   one (lab/tui/cadence.py). On a machine whose cores the engine keeps
   busy, that share is what the engine loses.
3. Run overhead: the same profile run headless (runner + store) and in the
   TUI, alternating, each in a fresh process; ratio of the median tok/s
   over arm x prompt x round cells. On the real demo (llama.cpp, embedded
   SmolLM2) the goal is >= 0.98.

    python -m benchmarks.tui_throughput render [--seconds 3] [--repeats 3]
    python -m benchmarks.tui_throughput cost [--rate 100] [--seconds 5]   # UI thread CPU, full and lean cadence
    python -m benchmarks.tui_throughput overhead [--profile profiles/demo.toml] [--max-tokens N] [--rounds N] [--repeats 3] [--refresh-hz HZ]
    python -m benchmarks.tui_throughput overhead --fake     # scripted backend, no model

Prints ratios and min/median/max over repeats; never asserts on time.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from benchmarks.common import ROOT, last_json_line, spread
from lab.base.events import Cell, RunFinished, RunStarted, Status, StatusChanged, TokenEvent
from lab.runner import RunControl, Runner
from lab.store import RunStore
from lab.tui.app import LabApp
from lab.tui.bridge import EventBridge
from lab.tui.cadence import FULL, LEAN, Cadence, cadence_for
from lab.tui.screens.run import RunScreen

LANES = 4
SIZE = (200, 50)
TOKEN_CHARS = 4


def _stats(xs: list[float]) -> str:
    return spread(xs, ",.0f", sep=" / ")


def _four_lane_profile(tmp: Path) -> Path:
    arms = "".join(
        f'[[arms]]\nname = "lane{i}"\nbackend = "fake"\n'
        + ('n_max = 4\noptions = { speculative = true }\n' if i % 2 else "")
        + "\n"
        for i in range(LANES)
    )
    path = tmp / "four.toml"
    path.write_text(
        '[profile]\nname = "four"\n[run]\nmax_tokens = 100\nrounds = 1\nwarmup = 0\n'
        '[[prompts]]\nname = "p"\ntext = "x"\n\n' + arms, encoding="utf-8",
    )
    return path


async def _render_once(
    seconds: float, rate: float | None, active: int = LANES, cadence: Cadence = FULL, lag_probe: bool = True,
) -> dict[str, float]:
    """Stream into ``active`` of the 4 lanes for ``seconds``; ``rate`` total
    tok/s or None (flat out). Also measures the UI thread's CPU time (the
    event loop runs on this thread) while the producer streams."""
    from tests.fakes import fake_registry

    tmp = Path(tempfile.mkdtemp(prefix="tui-bench-"))
    app = LabApp(str(_four_lane_profile(tmp)), registry=fake_registry(), runs_dir=tmp / "runs")
    lags: list[float] = []

    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, RunScreen)
        lanes = [screen.lane(a.name).text for a in screen.arms]

        def rendered_tokens() -> int:
            # every token is TOKEN_CHARS wide, so characters count tokens
            return sum(t.drafted_chars + t.target_chars for t in lanes) // TOKEN_CHARS
        bridge = EventBridge(screen.post_message, RunControl(), cadence)
        stop = threading.Event()
        offered = [0] * LANES
        bridge(RunStarted("four", "", tuple(a.name for a in screen.arms), ("p",), 1))
        for a in screen.arms:
            bridge(StatusChanged(Cell(a.name, "p", 1), Status.RUNNING))

        def produce() -> None:
            # One producer for the 4 lanes, like the runner's one thread;
            # it wakes every 2 ms and lands what is due, as an engine lands
            # a speculative step's tokens together.
            cells = [Cell(f"lane{i}", "p", 1) for i in range(LANES)]
            t0 = time.perf_counter()
            n = 0
            while not stop.is_set():
                due = int((time.perf_counter() - t0) * rate) if rate else n + 256
                while n < due:
                    i = n % active
                    k = n // LANES
                    bridge(TokenEvent(cells[i], f"{k % 1000:03d} ", (k,), bool(i % 2 and k % 3)))
                    offered[i] = k + 1
                    n += 1
                time.sleep(0.002 if rate else 0)

        async def probe() -> None:
            while not stop.is_set():
                t = time.perf_counter()
                await asyncio.sleep(0.01)
                lags.append(time.perf_counter() - t - 0.01)

        # the probe wakes the loop 100 times a second: left out when only
        # the UI's own CPU time is wanted
        probe_task = asyncio.create_task(probe() if lag_probe else asyncio.sleep(0))
        threads = [threading.Thread(target=produce, daemon=True)]
        start = time.perf_counter()
        ui_cpu0 = time.thread_time()
        for t in threads:
            t.start()
        await asyncio.sleep(seconds)
        ui_cpu = time.thread_time() - ui_cpu0
        stop.set()
        for t in threads:
            t.join()
        produced_s = time.perf_counter() - start
        bridge(RunFinished(""))
        # let the UI drain what was posted, and time how long that takes
        total = sum(offered)
        while rendered_tokens() < total and time.perf_counter() - start < seconds + 30:
            await pilot.pause(0.01)
        drained_s = time.perf_counter() - start
        await probe_task
    lags.sort()
    return {
        "offered_per_s": total / produced_s,
        "rendered_per_s": rendered_tokens() / drained_s,
        "drain_s": drained_s - produced_s,
        "lag_p99_ms": lags[int(len(lags) * 0.99) - 1] * 1000 if lags else 0.0,
        "lag_max_ms": lags[-1] * 1000 if lags else 0.0,
        "tokens": float(total),
        "ui_cpu_share": ui_cpu / seconds,
    }


def cmd_render(args: argparse.Namespace) -> None:
    print(f"render throughput: {LANES} lanes, {args.seconds:.0f} s per measurement, {args.repeats} repeats")
    flat = [asyncio.run(_render_once(args.seconds, None)) for _ in range(args.repeats)]
    print("  flat out (producers as fast as they can):")
    print(f"    rendered tok/s  {_stats([r['rendered_per_s'] for r in flat])}")
    print(f"    lag p99 ms      {_stats([r['lag_p99_ms'] for r in flat])}")
    print(f"    lag max ms      {_stats([r['lag_max_ms'] for r in flat])}")
    print("  offered rate -> rendered tok/s, p99 lag (median of repeats):")
    best = 0.0
    for rate in args.rates:
        runs = [asyncio.run(_render_once(args.seconds, rate)) for _ in range(args.repeats)]
        rendered = statistics.median(r["rendered_per_s"] for r in runs)
        offered = statistics.median(r["offered_per_s"] for r in runs)
        p99 = statistics.median(r["lag_p99_ms"] for r in runs)
        drain = statistics.median(r["drain_s"] for r in runs)
        sustained = p99 < 50 and drain < 0.2 and offered >= 0.95 * rate
        best = max(best, rate) if sustained else best
        print(f"    {rate:>8,.0f}: offered {offered:>8,.0f}  rendered {rendered:>8,.0f}  "
              f"p99 lag {p99:5.1f} ms  drain {drain:4.2f} s  {'sustained' if sustained else 'not sustained'}")
    print(f"  highest offered rate sustained with p99 lag < 50 ms: {best:,.0f} tok/s "
          f"(goal >= 5,000: {'met' if best >= 5000 else 'NOT met'})")


def cmd_cost(args: argparse.Namespace) -> None:
    print(f"UI cost: one lane streaming {args.rate:,.0f} tok/s (the runner runs one arm at a time), "
          f"{args.seconds:.0f} s, {args.repeats} repeats; UI thread CPU time as % of one core")
    cadences = [("idle (nothing streams)", FULL, 1e-3), (f"full ({FULL.text_hz:g} Hz text, {FULL.metrics_hz:g} Hz figures)", FULL, args.rate),
                (f"lean ({LEAN.text_hz:g} Hz text, {LEAN.metrics_hz:g} Hz figures)", LEAN, args.rate)]
    for label, cadence, rate in cadences:
        runs = [asyncio.run(_render_once(args.seconds, rate, active=1, cadence=cadence, lag_probe=False))
                for _ in range(args.repeats)]
        shares = [100 * r["ui_cpu_share"] for r in runs]
        print(f"  {label:<36} min {min(shares):5.1f} / median {statistics.median(shares):5.1f} / max {max(shares):5.1f}")


def _cell_tps(results: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str, int], float]:
    return {(r["arm"], r["prompt"], r["round"]): r["tok_per_s"] for r in results if r["status"] == "ok" and r["tok_per_s"]}


def _load(args: argparse.Namespace) -> tuple[Any, Any, Path]:
    from lab.profile.load import load_profile
    from lab.registry import load_registry

    tmp = Path(tempfile.mkdtemp(prefix="tui-overhead-"))
    if args.fake:
        from tests.fakes import fake_registry, profile_toml

        registry = fake_registry()
        path = tmp / "fake.toml"
        path.write_text(profile_toml(
            '[[arms]]\nname = "base"\nbackend = "fake"\noptions = { token_delay_s = 0.002 }\n\n'
            '[[arms]]\nname = "spec"\nbackend = "fake"\nn_max = 4\n'
            'options = { speculative = true, token_delay_s = 0.002 }\n',
            max_tokens=args.max_tokens or 400, rounds=args.rounds or 2, prompts=("prose", "code")))
    else:
        registry = load_registry()
        path = Path(args.profile)
    profile = load_profile(path, registry)
    run = profile.run
    if args.max_tokens:
        run = dataclasses.replace(run, max_tokens=args.max_tokens)
    if args.rounds:
        run = dataclasses.replace(run, rounds=args.rounds)
    profile = dataclasses.replace(profile, run=run)
    return profile, registry, tmp


def _headless(profile: Any, registry: Any, out: Path) -> dict[tuple[str, str, int], float]:
    return _cell_tps(Runner(profile, registry, RunStore(profile, out)).run())


async def _tui(profile: Any, registry: Any, out: Path, refresh_hz: float | None = None) -> dict[tuple[str, str, int], float]:
    app = LabApp(profile.path, registry=registry, runs_dir=out, refresh_hz=refresh_hz)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, RunScreen)
        screen.profile = profile  # with the benchmark's run settings
        await pilot.press("s")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert screen.session is not None
        return _cell_tps(screen.session.rows())


def cmd_one(args: argparse.Namespace) -> None:
    """One headless or TUI run in this (fresh) process; prints its cells' tok/s as JSON."""
    profile, registry, tmp = _load(args)
    out = Path(args.out)
    if args.mode == "headless":
        cells = _headless(profile, registry, out)
    else:
        cells = asyncio.run(_tui(profile, registry, out, args.refresh_hz))
    print(json.dumps([[*k, v] for k, v in cells.items()]))


def _one_process(args: argparse.Namespace, mode: str, out: Path) -> dict[tuple[str, str, int], float]:
    # Each run gets its own process. In one process the second run's engine
    # thread would share libgomp with the first run's: llama.cpp's OpenMP
    # workers then count more threads than cores and stop spinning between
    # barriers, which slowed whichever run came second by 10-20 % here.
    cmd = [sys.executable, "-m", "benchmarks.tui_throughput", "one", "--mode", mode, "--out", str(out), "--profile", args.profile,
           "--max-tokens", str(args.max_tokens), "--rounds", str(args.rounds)] + (["--fake"] if args.fake else [])
    if args.refresh_hz:
        cmd += ["--refresh-hz", str(args.refresh_hz)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"{mode} run failed:\n{done.stderr[-2000:]}")
    return {(a, p, int(r)): float(v) for a, p, r, v in last_json_line(done.stdout)}


def cmd_overhead(args: argparse.Namespace) -> None:
    profile, registry, tmp = _load(args)
    what = "fake backend (2 ms per token)" if args.fake else profile.path
    arm = profile.arms[0]
    cadence = cadence_for(registry.backend(arm.backend).busy_cores(arm.options, profile.run.threads),
                          text_hz=args.refresh_hz)
    print(f"run overhead: {what}, max_tokens {profile.run.max_tokens}, rounds {profile.run.rounds}, "
          f"warmup {profile.run.warmup}, {args.repeats} repeats (headless and TUI alternate, a process each); "
          f"TUI text at {cadence.text_hz:g} Hz, figures at {cadence.metrics_hz:g} Hz")
    ratios = []
    for i in range(args.repeats):
        head = _one_process(args, "headless", tmp / f"headless-{i}")
        tui = _one_process(args, "tui", tmp / f"tui-{i}")
        cells = sorted(set(head) & set(tui))
        if not cells:
            print("  no cell finished ok in both runs")
            return
        ratio = statistics.median(tui[c] / head[c] for c in cells)
        ratios.append(ratio)
        print(f"  repeat {i + 1}: median over {len(cells)} cells of TUI tok/s / headless tok/s = {ratio:.3f}  "
              f"(headless median {statistics.median(head.values()):.1f} tok/s, TUI {statistics.median(tui.values()):.1f})")
    print(f"  ratio min {min(ratios):.3f} / median {statistics.median(ratios):.3f} / max {max(ratios):.3f} "
          f"(goal >= 0.98 on the real demo)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("render")
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rates", type=float, nargs="*", default=[2000, 5000, 10000, 20000])
    p.set_defaults(func=cmd_render)
    p = sub.add_parser("cost")
    p.add_argument("--rate", type=float, default=100.0)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--repeats", type=int, default=3)
    p.set_defaults(func=cmd_cost)
    p = sub.add_parser("overhead")
    p.add_argument("--profile", default=str(ROOT / "profiles" / "demo.toml"))
    p.add_argument("--fake", action="store_true", help="the scripted fake backend instead of a real engine")
    p.add_argument("--max-tokens", type=int, default=0)
    p.add_argument("--rounds", type=int, default=0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--refresh-hz", type=float, help="force the TUI's text rate (default: its own choice)")
    p.set_defaults(func=cmd_overhead)
    p = sub.add_parser("one", help=argparse.SUPPRESS)
    p.add_argument("--mode", choices=("headless", "tui"), required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--profile", default=str(ROOT / "profiles" / "demo.toml"))
    p.add_argument("--fake", action="store_true")
    p.add_argument("--max-tokens", type=int, default=0)
    p.add_argument("--rounds", type=int, default=0)
    p.add_argument("--refresh-hz", type=float)
    p.set_defaults(func=cmd_one)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
