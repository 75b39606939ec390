"""``lab check PROFILE``: every problem a profile has that is knowable
without loading a model, with file, line and key."""

from __future__ import annotations

import argparse

from lab.base.textsafe import printable
from lab.cli.context import Context, checked_profile


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("profile")


def run(args: argparse.Namespace, ctx: Context) -> int:
    registry = ctx.registry
    profile = checked_profile(args.profile, registry)
    if profile is None:
        return 2
    cells = len(profile.arms) * len(profile.prompts) * profile.run.rounds
    print(
        f"{printable(profile.path)}: ok, {len(profile.arms)} arms x {len(profile.prompts)} prompts x "
        f"{profile.run.rounds} rounds = {cells} cells"
    )
    return 0
