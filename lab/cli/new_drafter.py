"""``lab new-drafter NAME``: a complete drafter plugin package to start
from (see :mod:`lab.scaffold`)."""

from __future__ import annotations

import argparse
import sys

from lab.cli.context import Context
from lab.scaffold import ScaffoldError, env_tool, write_drafter_package

DESCRIPTION = ("Write a complete drafter plugin package (pyproject.toml with the lab.drafters "
               "entry point, a module with a working Drafter, a profile, a README): pip install -e it, "
               "then lab plugins lists it and lab run NAME.toml runs it.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="the drafter's name, as profiles will spell it (drafter = \"NAME\")")
    p.add_argument("--dir", help="where to write it (default: ./lab-NAME-drafter; must not exist or be empty)")


def run(args: argparse.Namespace, ctx: Context) -> int:
    try:
        made = write_drafter_package(args.name, args.dir)
    except (ScaffoldError, OSError) as exc:
        print(f"lab: {exc}", file=sys.stderr)
        return 2
    for path in made.files:
        print(f"wrote {path}")
    from lab.base.machine import own_tool

    pip, lab = own_tool("pip"), own_tool("lab")
    print(f"\nnext, from here: {pip} install -e {made.directory} && {lab} plugins && "
          f"{lab} run {made.directory / (made.name + '.toml')}")
    print(f"its tests: {pip} install pytest (once), then cd {made.directory} && {env_tool('pytest')} -q")
    return 0
