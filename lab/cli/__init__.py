"""The ``lab`` command: one module per command, each with
``add_arguments(parser)``, ``run(args, ctx)`` and, if it wants one, a
``DESCRIPTION``. :func:`usage_lines` lists every command's usage as its
parser states it (the README's command list follows it).

Only the running command's module is imported; the plugin registry is built
once, when :class:`lab.cli.context.Context` is first asked for it."""

from __future__ import annotations

import argparse
import importlib
import os
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
    "fetch": ("fetch", "fetch the hub models a profile names into the hub cache, printing what each arm loads"),
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


# what `lab -h` says of the TUI, which has no command name
TUI_EPILOG = """Without a command, the TUI:
  lab [PROFILE.toml]          on a profile (default: profiles/demo.toml); s starts it
  lab RUN_DIR                 on a saved run directory, read-only
  lab --compare RUN_A RUN_B   two saved runs side by side
  --refresh-hz HZ             how often the lanes repaint while a run streams

What changed between two saved runs, headless: lab report RUN_A --compare RUN_B"""


def command_module(name: str) -> ModuleType:
    return importlib.import_module(f"lab.cli.{COMMANDS[name][0]}")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command parser; ``command`` names the one that will run: only its
    module is imported and only its arguments are added."""
    parser = argparse.ArgumentParser(
        prog="lab", description="speclab: a terminal lab for speculative decoding",
        epilog=TUI_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
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


def usage_lines() -> list[str]:
    """One usage line per command, the TUI's first, from the parsers
    themselves (imports every command module)."""
    def usage(parser: argparse.ArgumentParser) -> str:
        return " ".join(parser.format_usage().split()).removeprefix("usage: ")

    lines = [usage(tui.parser())]
    for name in COMMANDS:
        parser = argparse.ArgumentParser(prog=f"lab {name}")
        command_module(name).add_arguments(parser)
        lines.append(usage(parser))
    return lines


def main(argv: Sequence[str] | None = None, registry: Registry | None = None) -> int:
    """Run one command; ``registry`` stands in for the installed plugins
    (tests, programs that embed the lab), else they load when asked."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    ctx = Context(registry)
    if not args_list or args_list[0] not in (*COMMANDS, "-h", "--help"):
        tui_args = tui.parser().parse_args(args_list)
        return _plugin_errors_end_in_a_message(lambda: tui.run(tui_args, ctx))
    args = build_parser(args_list[0]).parse_args(args_list)
    code = _plugin_errors_end_in_a_message(lambda: int(args.func(args, ctx)))
    if argv is None:
        _end_past_lingering_threads(code)
    return code


def program(command: Callable[[list[str]], int] | None = None) -> int:
    """The ``lab`` program (its console script and ``python -m lab``): the
    command runs with the lab as the reaper of what its plugins orphan, and
    on every way out (Ctrl-C and SIGTERM included) every process still below
    the lab is ended: no server, arm or helper outlives it. ``command`` (the
    command line's by default) is for tests."""
    import signal

    from lab.cli.context import EXIT_SIGINT, EXIT_SIGTERM, Terminated
    from lab.kit.children import adopt_orphans, end_descendants

    adopt_orphans()
    terminated: list[int] = []

    def on_term(signum: int, _frame: object) -> None:
        if not terminated:
            terminated.append(signum)
            raise Terminated()

    previous = signal.signal(signal.SIGTERM, on_term)
    argv = sys.argv[1:]
    try:
        return command(argv) if command is not None else main()
    except KeyboardInterrupt:
        print(f"\nlab: {'terminated (SIGTERM)' if terminated else 'interrupted (Ctrl-C)'}", file=sys.stderr)
        return EXIT_SIGTERM if terminated else EXIT_SIGINT
    finally:
        signal.signal(signal.SIGTERM, previous)
        end_descendants()


def _end_past_lingering_threads(code: int) -> None:
    """As the program (argv from the command line), end now when a plugin
    left a non-daemon thread running: Python would wait for it at exit,
    for ever if it never ends. The run's files are written by then."""
    from lab.telemetry.leftovers import lingering_threads

    left = lingering_threads()
    if not left:
        return
    names = ", ".join(t.name for t in left[:5])
    print(f"lab: {len(left)} thread(s) a plugin started still run ({printable(names)}); ending without them",
          file=sys.stderr)
    from lab.kit.children import end_descendants

    end_descendants()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _plugin_errors_end_in_a_message(command: Callable[[], int]) -> int:
    """LAB_PLUGINS_STRICT=1 makes a plugin that fails to load fatal: the
    command ends there with the plugin and its error, exit 2."""
    try:
        return command()
    except PluginLoadError as exc:
        print(f"lab: {printable(exc)} (LAB_PLUGINS_STRICT is set)", file=sys.stderr)
        return 2
