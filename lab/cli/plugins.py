"""``lab plugins``: the installed backends and drafters with their
options, the built-in models, the limits every profile is held to, and
plugins that failed."""

from __future__ import annotations

import argparse

from lab.base.limits import describe_limits
from lab.base.textsafe import printable
from lab.cli.context import Context


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--strict", action="store_true", help="exit 1 when a plugin failed to load")


def run(args: argparse.Namespace, ctx: Context) -> int:
    # names, descriptions and errors come from whatever plugins are installed
    def say(text: str) -> None:
        print(printable(text))

    registry = ctx.registry
    say("backends:")
    for name, cls in sorted(registry.backends.items()):
        say(f"  {name}  [stack {cls.stack}{', runs drafters' if cls.accepts_drafters else ''}]  {cls.description}")
        for opt in cls.options:
            say(f"      {opt.describe()}")
    say("drafters (run by the lab's verify loop, on backends that run drafters; a server backend drafts "
        "with its own --spec-type instead):")
    for name, dcls in sorted(registry.drafters.items()):
        hosts = registry.drafter_backends(dcls)
        runs_on = f"runs on {', '.join(hosts)}" if hosts else "no installed backend runs it"
        # what rounds mean for it: a drafter that keeps state forgets it
        # before each cold round, and learns across warm ones
        state = ("keeps state across requests: forgotten between cold rounds" if dcls.keeps_state
                 else "no state across requests")
        say(f"  {name}  [{runs_on}; {state}]  {dcls.description}")
        for opt in dcls.options:
            say(f"      {opt.describe()}")
    from lab.kit.models import known_models

    say("models (built-in references a profile's model = ... may name; a path works too):")
    for ref in known_models():
        say(f"  {ref}")
    # what every profile is held to before an engine starts, beside the plugins' own ranges
    say("profile limits:")
    for key, bound in describe_limits().items():
        say(f"  {key}: {bound}")
    if registry.errors:
        say("load errors:")
        for err in registry.errors:
            say(f"  {err.entry_point} ({err.group}): {err.error}")
    return 1 if registry.errors and args.strict else 0
