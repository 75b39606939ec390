"""What every command shares: the one plugin registry of the invocation
(loaded the first time a command asks, never twice), the exit statuses of a
run stopped from outside, and SIGTERM turned into Ctrl-C."""

from __future__ import annotations

import signal
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from lab.base.profile import Profile
from lab.base.textsafe import printable
from lab.profile.load import ProfileError, check_profile, option_warnings
from lab.registry import Registry, load_registry

# Exit statuses of a run stopped from outside: the shell's 128 + signal.
EXIT_SIGINT = 130
EXIT_SIGTERM = 143
# the run finished and saved, but at least one row is error, crashed or oom
EXIT_ROW_FAILED = 3
DEFAULT_PROFILE = "profiles/demo.toml"


class Context:
    """One invocation of ``lab``: commands take the registry from here, so
    it is built once (and only by the commands that need plugins)."""

    def __init__(self, registry: Registry | None = None) -> None:
        self._registry = registry

    @property
    def registry(self) -> Registry:
        if self._registry is None:
            self._registry = load_registry()
        return self._registry


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so that a run ends exactly as
    Ctrl-C ends it."""


@contextmanager
def sigterm_as_interrupt() -> Iterator[list[int]]:
    """While inside, SIGTERM raises :class:`Terminated` (the yielded list
    holds it); a second one during the clean-up is ignored."""
    got: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        if got:
            return
        got.append(signum)
        raise Terminated()

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: nothing to install
        yield got
        return
    try:
        yield got
    finally:
        signal.signal(signal.SIGTERM, previous)


def default_profile() -> Path:
    """profiles/demo.toml in the working directory, else the one beside the
    package (an editable or source checkout)."""
    here = Path(DEFAULT_PROFILE)
    if here.exists():
        return here
    return Path(__file__).resolve().parents[2] / DEFAULT_PROFILE


def load_errors_line(registry: Registry) -> str:
    """Plugins that failed to load, in one line."""
    names = ", ".join(printable(e.entry_point) for e in registry.errors)
    return f"plugins not loaded: {names} (`lab plugins` says why)"


def checked_profile(path: str, registry: Registry) -> Profile | None:
    """The profile with everything knowable without a model checked, its
    backends' option warnings printed; None (the error printed) when it is
    refused."""
    try:
        profile = check_profile(path, registry)
    except ProfileError as exc:
        for problem in exc.problems:
            print(f"lab: {problem}", file=sys.stderr)
        if len(exc.problems) > 1:
            print(f"lab: {len(exc.problems)} problems in {printable(path)}", file=sys.stderr)
        return None
    for line in option_warnings(profile, registry):
        print(f"lab: warning: {printable(line)}", file=sys.stderr)
    return profile


def engines_ready(profile: Profile, registry: Registry, then: str = "run", missing: int = 2) -> int | None:
    """None when every arm's engine can load here; else the exit status:
    ``missing`` with each engine that cannot printed (the arms, what is
    missing, the command that installs it), or EXIT_SIGINT / EXIT_SIGTERM
    when Ctrl-C or SIGTERM came while asking (said on stderr before a run)."""
    from lab.profile.engines import missing_engines

    term: list[int] = []
    try:
        with sigterm_as_interrupt() as term:
            problems = missing_engines(profile, registry)
            for problem in problems:
                print(f"lab: {problem.line()}", file=sys.stderr)
    except KeyboardInterrupt:
        if then == "run":
            print(f"\nlab: {'terminated (SIGTERM)' if term else 'interrupted'} before the run started", file=sys.stderr)
        return EXIT_SIGTERM if term else EXIT_SIGINT
    if problems:
        print(f"lab: {'nothing was run; ' if then == 'run' else ''}install what is missing "
              f"(`lab doctor` lists every engine), then {then} again", file=sys.stderr)
        return missing
    return None
