"""``lab check PROFILE``: every problem a profile has that is knowable
without loading a model, with file, line and key; its hub models' sizes
and which the cache lacks (the hub asked only for those); then each arm's
expected memory against the budget where it runs (an arm that will not fit
fails the check, with what would fit)."""

from __future__ import annotations

import argparse
import sys

from lab.base.textsafe import printable
from lab.cli.context import EXIT_SIGINT, EXIT_SIGTERM, Context, checked_profile, engines_ready
from lab.cli.fetch import check_models
from lab.profile.model_uses import model_uses


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("profile")


def run(args: argparse.Namespace, ctx: Context) -> int:
    """Every stage is checked whatever an earlier one found (a profile that
    reads is held to its engines, its hub models and its memory alike), and
    the exit status is the worst: 2 for the profile or a model, 1 for an
    engine or an arm that will not fit."""
    registry = ctx.registry
    profile = checked_profile(args.profile, registry)
    if profile is None:
        return 2
    status = engines_ready(profile, registry, then="check", missing=1)
    if status in (EXIT_SIGINT, EXIT_SIGTERM):
        return status
    failed = ["engines"] if status is not None else []
    # an arm whose acceptance is set for one prompt runs that prompt only
    one_prompt = sum(1 for a in profile.arms if a.acceptance is not None and a.acceptance.prompt is not None)
    all_prompts = len(profile.arms) - one_prompt
    cells = (all_prompts * len(profile.prompts) + one_prompt) * profile.run.rounds
    if one_prompt:
        shape = f"({all_prompts} arms x {len(profile.prompts)} prompts + {one_prompt} arms of one prompt)"
    else:
        shape = f"{len(profile.arms)} arms x {len(profile.prompts)} prompts"
    models = check_models(args.profile, model_uses(profile, registry))
    if models is not None:
        failed.append("models")
    state = "" if failed else "ok, "
    print(f"{printable(profile.path)}: {state}{shape} x {profile.run.rounds} rounds = {cells} cells")
    from lab.cli.fit import report_fit

    refused = report_fit(profile, registry)
    if refused:
        print(f"lab: {len(refused)} arm(s) will not fit in memory here; `lab run --force` tries anyway",
              file=sys.stderr)
        failed.append("memory")
    if len(failed) > 1:
        print(f"lab: {printable(profile.path)}: problems with its {', '.join(failed)} (each said above)",
              file=sys.stderr)
    if models is not None:
        return models
    return 1 if failed else 0
