"""``lab [PROFILE.toml | RUN_DIR]``: the TUI, opened on a profile (default:
profiles/demo.toml) or on a saved run directory (read-only)."""

from __future__ import annotations

import argparse
import os
import sys

from lab.base import rundir
from lab.cli.context import Context, default_profile


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lab", description="Open the lab's TUI on a profile (default: profiles/demo.toml) or on a saved "
        "run directory (read-only). "
        "`lab -h` lists the commands.")
    p.add_argument("profile", nargs="?", help="a profile file, or a saved run directory to open read-only")
    p.add_argument(
        "--refresh-hz", type=float, metavar="HZ",
        help="how often lanes repaint while a run streams (default: 30, or 5 when the engine's threads "
        "take every core, so the view does not slow the engine it measures)")
    p.add_argument(
        "--compare", nargs=2, metavar=("RUN_A", "RUN_B"),
        help="open two saved run directories side by side (what `lab report RUN_A --compare RUN_B` says)")
    return p


def run(args: argparse.Namespace, ctx: Context) -> int:
    if args.profile and not os.path.exists(args.profile):
        print(f"lab: no such profile or command: {args.profile}", file=sys.stderr)
        return 2
    saved_run = args.profile if args.profile and os.path.isdir(args.profile) else None
    if saved_run is not None and not rundir.is_run_dir(saved_run):
        print(f"lab: {saved_run}: a directory but not a saved run (no results.json); "
              "lab opens a profile file or a run directory", file=sys.stderr)
        return 2
    if args.refresh_hz is not None and not 0 < args.refresh_hz <= 120:
        print("lab: --refresh-hz must be above 0 and at most 120", file=sys.stderr)
        return 2
    if args.compare:
        for run_dir in args.compare:
            if not rundir.is_run_dir(run_dir):
                print(f"lab: {run_dir}: not a saved run directory (no results.json)", file=sys.stderr)
                return 2
    try:
        # Textual loads only when the TUI opens, never for a headless command.
        from lab.tui.app import run_app
    except ImportError as exc:
        print(f"lab: the TUI is not available ({exc}); use `lab run PROFILE`", file=sys.stderr)
        return 2
    if saved_run is not None:
        return run_app(None, args.refresh_hz, saved_run=saved_run)
    profile = args.profile or str(default_profile())
    if args.compare:
        return run_app(profile, args.refresh_hz, compare=(args.compare[0], args.compare[1]))
    return run_app(profile, args.refresh_hz)
