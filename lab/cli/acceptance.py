"""``lab acceptance RUN_DIR``: a run's acceptance per draft position as a
small portable file (what ``lab predict`` prices on another machine)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lab.analysis import acceptance_file
from lab.base.probe import ProbeError
from lab.base.textsafe import printable
from lab.cli.context import Context
from lab.render.report import load_for_report

DESCRIPTION = ("Export a run's acceptance per draft position (per arm x prompt and per category, with the target, "
               "drafter, n_max, temperature and prompt hashes) as JSON. `lab run` writes it as RUN_DIR/acceptance.json; "
               "carry it to another machine and price it there with `lab predict FILE --probe PROBE.json`.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir")
    p.add_argument("-o", "--out", metavar="FILE", help="write here (a file, or a directory: DIR/acceptance.json); "
                   "default: print the JSON")


def run(args: argparse.Namespace, ctx: Context) -> int:
    try:
        data = load_for_report(args.run_dir)
    except (OSError, ValueError, ProbeError) as exc:
        print(f"lab: {printable(exc)}", file=sys.stderr)
        return 2
    if data.get("steps") is None:
        print(f"lab: {printable(args.run_dir)}: not a run directory with steps.jsonl; acceptance per position "
              "needs the run's steps", file=sys.stderr)
        return 2
    profile = acceptance_file.build(data, Path(args.run_dir).resolve().name)
    if not profile["entries"]:
        print(f"lab: {printable(args.run_dir)}: no speculative arm saved steps; nothing to export", file=sys.stderr)
        return 2
    if not args.out:
        from lab.base.strictjson import dumps

        sys.stdout.write(printable(dumps(profile, indent=1), keep="\n") + "\n")
        return 0
    try:
        path = acceptance_file.save(profile, args.out)
    except OSError as exc:
        print(f"lab: acceptance profile not written to {printable(args.out)} ({exc.strerror or exc})", file=sys.stderr)
        return 2
    print(f"saved: {printable(path)} ({len(profile['entries'])} entries)")
    return 0
