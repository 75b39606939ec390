"""``lab lossless``: its arguments and what it prints and saves; the check
itself is :mod:`lab.lossless`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence, TextIO

from lab.analysis.lossless_loader import FILE
from lab.api import EngineFailure
from lab.base import rundir
from lab.base.strictjson import dumps
from lab.cli.context import Context
from lab.lossless import (
    DEFAULT_CONTEXTS,
    DrafterSpec,
    default_drafters,
    run_lossless_check,
)
from lab.registry import Registry, load_registry
from lab.render.report import write_report

DESCRIPTION = ("Sample plain and speculative continuations of the same contexts and test that their "
               "token distributions agree (per position, Holm-corrected permutation tests).")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-d", "--drafter", action="append", default=[], metavar="NAME[:KEY=VALUE,...]",
                        help="a drafter to check, with options (repeatable), e.g. ngram or "
                             "draft-model:model=embedded:smollm2-q4_0; default: every installed drafter "
                             "that needs no option")
    parser.add_argument("--backend", default="llamacpp", help="backend that runs the loop (default llamacpp)")
    parser.add_argument("--model", default="embedded:smollm2", help="target model (default embedded:smollm2)")
    parser.add_argument("--backend-option", action="append", default=[], metavar="KEY=VALUE",
                        help="a backend option (repeatable)")
    parser.add_argument("--context", action="append", default=[], metavar="NAME=TEXT",
                        help="a raw-text context to continue (repeatable; default: three built-in ones)")
    parser.add_argument("--temperature", type=float, default=0.8, help="sampling temperature (default 0.8)")
    parser.add_argument("-n", "--samples", type=int, default=100,
                        help="continuations per side and context (default 100; 400 halves the smallest detectable distance)")
    parser.add_argument("--tokens", type=int, default=5, help="tokens per continuation (default 5)")
    parser.add_argument("--n-max", type=int, default=4, help="most tokens drafted per step (default 4)")
    parser.add_argument("--alpha", type=float, default=0.01,
                        help="family-wise false-failure rate for the whole run (default 0.01)")
    parser.add_argument("--permutations", type=int, default=None,
                        help="permutations per test (default: enough for the Holm thresholds)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="engine threads (0: every available core)")
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    parser.add_argument("--run", metavar="RUN_DIR",
                        help="also save the result in a run directory (lossless.json) and add it to its report.md")


def _pairs(items: Sequence[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ValueError(f"{what} {item!r} is not KEY=VALUE")
        out[key] = value
    return out


def run(args: argparse.Namespace, ctx: Context) -> int:
    return main(args, registry=ctx.registry)


def main(args: argparse.Namespace, out: TextIO | None = None, registry: Registry | None = None) -> int:
    out = out if out is not None else sys.stdout
    if getattr(args, "run", None):
        if not rundir.is_run_dir(args.run):
            print(f"lab lossless: --run {args.run}: not a run directory (no results.json)", file=sys.stderr)
            return 2
    try:
        registry = registry if registry is not None else load_registry()
        drafters = [DrafterSpec.parse(d) for d in args.drafter] or default_drafters(registry, args.backend)
        contexts = list(_pairs(args.context, "context").items()) or list(DEFAULT_CONTEXTS)
        report = run_lossless_check(
            drafters, backend=args.backend, model=args.model or None,
            backend_options=_pairs(args.backend_option, "backend option"), contexts=contexts,
            temperature=args.temperature, samples=args.samples, tokens=args.tokens, n_max=args.n_max,
            alpha=args.alpha, permutations=args.permutations, seed=args.seed, threads=args.threads,
            registry=registry, out=out,
        )
    except (KeyError, ValueError, EngineFailure) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"lab lossless: {message}", file=sys.stderr)
        return 2
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            fh.write(dumps(report.to_dict(), indent=2))
    if args.run:
        run_dir = Path(args.run)
        (run_dir / FILE).write_text(dumps(report.to_dict(), indent=2), encoding="utf-8")
        write_report(run_dir)
    return report.exit_code
