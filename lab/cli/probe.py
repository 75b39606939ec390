"""``lab probe``: measure a backend's verify cost T(w), print the curve,
save it as JSON (what a run's predictions are priced with)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path
from typing import Callable

from lab.analysis.roofline import Roofline
from lab.api import EngineFailure
from lab.base import probe
from lab.base.profile import RunSettings
from lab.cli.context import EXIT_SIGINT, EXIT_SIGTERM, Context, sigterm_as_interrupt
from lab.probing import driver
from lab.probing.target import ProbeTarget, resolve
from lab.render.surface import surface_table


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", help="backend (default: the --arm's, else llamacpp)")
    p.add_argument("--model", help="model (default: the --arm's, else embedded:smollm2)")
    p.add_argument("--option", action="append", metavar="KEY=VALUE",
                   help="a backend option, as a profile arm's options take it (repeatable), e.g. n_gpu_layers=999")
    p.add_argument("--n-gpu-layers", type=int, metavar="N", help="short for --option n_gpu_layers=N")
    p.add_argument("--profile", metavar="FILE", help="take backend, model, options and threads from an arm of this profile")
    p.add_argument("--arm", metavar="NAME", help="the --profile arm (default: its first speculative arm)")
    p.add_argument("--widths", default="1-16", help="widths to verify, e.g. 1-16 or 1,2,4,8 (1 is always added)")
    p.add_argument("--depths", metavar="D,D,...",
                   help="KV depths to measure at, tokens in the cache before each timed pass, e.g. 512,2048,8192 "
                   "(or 512,2k,8k): one curve per depth, saved as one surface file lab predict reads "
                   "(default: the backend's own prefix)")
    p.add_argument("--n-ctx", type=int, metavar="N",
                   help="the context to load with (default: the deepest depth plus the widest width, at least 1024)")
    p.add_argument("--method", help="how to measure (llamacpp: decode, decode-interleaved, batched-bench); "
                   "default: the backend's first")
    p.add_argument("--tokens", type=int, metavar="N",
                   help="for a backend that times whole requests (llama-server): tokens of each timed request, "
                   "after a warmup as long as a run's (64), as a run of max_tokens N sends them (default: the --profile's "
                   "max_tokens, else the probe's own, 48 and up)")
    p.add_argument("--repeats", type=int, default=3, help="measurements for min/median/max (default 3)")
    p.add_argument("--threads", type=int, default=0, help="engine threads (default: the backend's)")
    p.add_argument("--out", help="save the probe as JSON here (a file, or a run directory: RUN/probe.json)")
    p.add_argument("--no-bandwidth", action="store_true", help="skip the memory-bandwidth measurement")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def run(args: argparse.Namespace, ctx: Context) -> int:
    def say(msg: str) -> None:
        if not args.quiet:
            print(f"  {msg}", file=sys.stderr, flush=True)

    term: list[int] = []
    try:
        widths = probe.parse_widths(args.widths)
        registry = ctx.registry
        # The backend's options (GPU layers...) as the run will load it.
        options = list(args.option or []) + ([f"n_gpu_layers={args.n_gpu_layers}"] if args.n_gpu_layers is not None else [])
        target = resolve(registry, args.backend, args.model, options, args.profile, args.arm, args.threads)
        if args.tokens is not None:
            if args.tokens < 1:
                raise probe.ProbeError(f"--tokens {args.tokens}: a request generates at least one token")
            target = dataclasses.replace(target, requests=RunSettings(max_tokens=args.tokens).request_lengths())
        say(f"target: {target.backend} / {target.model} from {target.source}, options {dict(target.options)}")
        if args.n_ctx is not None and args.n_ctx < 1:
            raise probe.ProbeError(f"--n-ctx {args.n_ctx}: a context holds at least one token")
        if args.depths:
            depths = probe.parse_depths(args.depths)
            n_ctx = args.n_ctx or driver.default_n_ctx(widths, max(depths))
            return _surface(args, ctx, target, widths, depths, n_ctx, say)
        with sigterm_as_interrupt() as term:
            result = driver.measure(
                target.backend, target.model, widths, method=args.method, repeats=args.repeats,
                threads=target.threads, registry=registry, options=target.options, bandwidth=not args.no_bandwidth,
                progress=say, n_ctx=args.n_ctx, requests=target.requests,
            )
    except KeyboardInterrupt as exc:
        return _interrupted(args, exc, bool(term))
    except (probe.ProbeError, ValueError, KeyError, OSError, RuntimeError, NotImplementedError, EngineFailure) as exc:
        print(f"lab: probe failed: {exc}", file=sys.stderr)
        return 2
    print(result.render())
    if result.bandwidth_bytes_s and result.model_bytes and not result.on_gpu:
        print(Roofline(result.model_bytes, result.bandwidth_bytes_s, "measured read bandwidth").line())
    return _saved(args.out, lambda out: probe.save(result, out), "the curve is")


def _interrupted(args: argparse.Namespace, exc: KeyboardInterrupt, terminated: bool) -> int:
    """Ctrl-C or SIGTERM stopped `lab probe`: show and save the repeats that
    finished (each holds every width), and say how much that is."""
    code = EXIT_SIGTERM if terminated else EXIT_SIGINT
    kept = exc.probe if isinstance(exc, probe.ProbeInterrupted) else None
    if kept is None:
        print("\nlab: probe stopped before its first repeat finished; nothing measured to keep", file=sys.stderr)
        return code
    print(kept.render())
    out = args.out or f"probe-{kept.backend}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    print(f"\nlab: probe stopped {kept.notes.get('interrupted', '')}; kept {len(kept.seconds)} repeat(s) of "
          f"widths {probe.format_widths(kept.widths)}", file=sys.stderr)
    print(f"saved: {probe.save(kept, out)}")
    return code


SURFACE_FILE = "probe-surface.json"


def _surface(args: argparse.Namespace, ctx: Context, target: ProbeTarget, widths: tuple[int, ...],
             depths: tuple[int, ...], n_ctx: int, say: Callable[[str], None]) -> int:
    """One curve per KV depth, the model loaded once with the same context
    (``n_ctx``) for all, then the table of them and one surface file. Ctrl-C
    keeps the depths that finished."""
    done: list[probe.Probe] = []
    term: list[int] = []

    def finished(curve: probe.Probe) -> None:
        done.append(curve)
        print(curve.render() + "\n")

    try:
        with sigterm_as_interrupt() as term:
            say(f"KV depths {', '.join(map(str, depths))}, n_ctx {n_ctx}")
            done[:] = driver.measure_depths(
                target.backend, target.model, depths, widths, method=args.method, repeats=args.repeats,
                threads=target.threads, registry=ctx.registry, options=target.options,
                bandwidth=not args.no_bandwidth, progress=say, n_ctx=n_ctx, on_curve=finished,
                requests=target.requests,
            )
            first = done[0]
            if first.bandwidth_bytes_s and first.model_bytes and not first.on_gpu:
                # the machine's bandwidth does not depend on the depth: measured once, after the engine closed
                print(Roofline(first.model_bytes, first.bandwidth_bytes_s, "measured read bandwidth").line() + "\n")
    except KeyboardInterrupt:
        code = EXIT_SIGTERM if term else EXIT_SIGINT
        if not done:
            print("\nlab: probe stopped before its first depth finished; nothing measured to keep", file=sys.stderr)
            return code
        print(f"\nlab: probe stopped; kept depths {', '.join(str(p.depth) for p in done)} of "
              f"{', '.join(map(str, depths))}", file=sys.stderr)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        print(f"saved: {_save_surface(done, args.out or f'probe-surface-{stamp}.json')}")
        return code
    except (probe.ProbeError, ValueError, KeyError, OSError, RuntimeError, NotImplementedError, EngineFailure) as exc:
        print(f"lab: probe failed: {exc}", file=sys.stderr)
        return 2
    if len(done) > 1:
        print(surface_table(probe.Surface(tuple(done))))
    return _saved(args.out, lambda out: _save_surface(done, out), "the curves are")


def _saved(out: str | None, save: Callable[[str], Path], what: str) -> int:
    """Save to ``out`` where one is given; a failed save costs the file, not
    what was printed: the exit status says so."""
    if not out:
        return 0
    try:
        print(f"saved: {save(out)}")
    except OSError as exc:
        print(f"lab: probe not saved to {out} ({exc.strerror or exc}); {what} printed above", file=sys.stderr)
        return 2
    return 0


def _save_surface(done: list[probe.Probe], out: str) -> Path:
    """One depth as a plain probe (a run can use it), several as a surface."""
    if len(done) == 1:
        return probe.save(done[0], out)
    path = Path(out)
    return probe.save_surface(probe.Surface(tuple(done)), path / SURFACE_FILE if path.is_dir() else path)
