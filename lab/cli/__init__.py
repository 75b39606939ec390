"""The ``lab`` command: one module per command, each with
``add_arguments(parser)``, ``run(args, ctx)`` and, if it wants one, a ``DESCRIPTION``.

lab                         open the TUI on profiles/demo.toml
lab PROFILE.toml            open the TUI on a profile
lab run PROFILE [--out DIR] run headless, print progress and the comparison
lab report RUN_DIR [--format md|csv|json] [--compare RUN_B] [--probe FILE]
lab probe [--backend B] [--model M] [--option K=V] [--profile P [--arm A]] [--widths 1-16] [--method M] [--out FILE]
lab acceptance RUN_DIR [-o FILE]  a run's acceptance per draft position, portable
lab predict ACCEPTANCE --probe FILE [--draft-probe FILE] [--loop-us US]  would it pay on that machine?
lab check PROFILE           validate a profile without loading a model
lab lossless [-d DRAFTER]   test at temperature > 0 that drafters keep the target's distribution
lab plugins                 backends, drafters, their options, load errors
lab new-drafter NAME [--dir DIR]  write a drafter plugin package to start from
lab doctor                  engines, tools and models, and how to fix what is missing

Only the module of the command that runs is imported, so ``lab -h`` loads
no engine, plugin or statistics package, and one command never pays for
another's imports. The plugin registry is built once per invocation, by
the first command that asks :class:`lab.cli.context.Context` for it.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from types import ModuleType
from typing import Callable, Sequence

from lab.base.textsafe import printable
from lab.cli import tui
from lab.cli.context import Context
from lab.registry import PluginLoadError, Registry

# The commands, in the order `lab -h` lists them: name -> (module under
# lab.cli, what `lab -h` says of it without importing it).
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("run", "run a profile headless and save a run directory"),
    "check": ("check", "validate a profile without loading a model (file:line and key for every problem)"),
    "lossless": ("lossless", "test at temperature > 0 that drafters keep the target's token distribution "
                 "(speculative vs plain sampling)"),
    "report": ("report", "render a saved run"),
    "probe": ("probe", "measure verify cost T(w) of a backend and model"),
    "acceptance": ("acceptance", "export a run's acceptance per draft position as a portable file"),
    "predict": ("predict", "price an acceptance file with another machine's probe: speedup per n_max"),
    "plugins": ("plugins", "list backends, drafters and plugin load errors"),
    "new-drafter": ("new_drafter", "write a minimal drafter plugin package to start from"),
    "doctor": ("doctor", "check engines, tools and models"),
}


def command_module(name: str) -> ModuleType:
    return importlib.import_module(f"lab.cli.{COMMANDS[name][0]}")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command parser; ``command`` names the one that will run: only its
    module is imported and only its arguments are added."""
    parser = argparse.ArgumentParser(
        prog="lab", description="speclab: a terminal lab for speculative decoding",
        epilog="Without a command, `lab [--refresh-hz HZ] [PROFILE.toml]` opens the TUI "
        "(default profile: profiles/demo.toml).")
    sub = parser.add_subparsers(dest="command")
    for name, (_, help_line) in COMMANDS.items():
        if name != command:
            sub.add_parser(name, help=help_line)
            continue
        module = command_module(name)
        p = sub.add_parser(name, help=help_line, description=getattr(module, "DESCRIPTION", None))
        module.add_arguments(p)
        p.set_defaults(func=module.run)
    return parser


def main(argv: Sequence[str] | None = None, registry: Registry | None = None) -> int:
    """Run one command; ``registry`` stands in for the installed plugins
    (tests, programs that embed the lab), else they load when asked."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    ctx = Context(registry)
    if not args_list or args_list[0] not in (*COMMANDS, "-h", "--help"):
        tui_args = tui.parser().parse_args(args_list)
        return _plugin_errors_end_in_a_message(lambda: tui.run(tui_args, ctx))
    args = build_parser(args_list[0]).parse_args(args_list)
    return _plugin_errors_end_in_a_message(lambda: int(args.func(args, ctx)))


def _plugin_errors_end_in_a_message(command: Callable[[], int]) -> int:
    """LAB_PLUGINS_STRICT=1 makes a plugin that fails to load fatal: the
    command ends there with the plugin and its error, exit 2."""
    try:
        return command()
    except PluginLoadError as exc:
        print(f"lab: {printable(exc)} (LAB_PLUGINS_STRICT is set)", file=sys.stderr)
        return 2
