"""``lab check PROFILE``: every problem a profile has that is knowable
without loading a model, with file, line and key."""

from __future__ import annotations

import argparse
import sys

from lab.base.textsafe import printable
from lab.cli.context import Context
from lab.profile.load import ProfileError, check_profile, option_warnings


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("profile")


def run(args: argparse.Namespace, ctx: Context) -> int:
    registry = ctx.registry
    try:
        profile = check_profile(args.profile, registry)
    except ProfileError as exc:
        print(f"lab: {exc}", file=sys.stderr)
        return 2
    for line in option_warnings(profile, registry):
        print(f"lab: warning: {printable(line)}", file=sys.stderr)
    cells = len(profile.arms) * len(profile.prompts) * profile.run.rounds
    print(
        f"{printable(profile.path)}: ok, {len(profile.arms)} arms x {len(profile.prompts)} prompts x "
        f"{profile.run.rounds} rounds = {cells} cells"
    )
    return 0
