"""Whether every arm's engine can load on this machine, asked before a run
measures anything: ``lab check``, ``lab run`` and the TUI refuse a profile
whose arm needs an engine that is not there, naming the arms, what is
missing and the one command that installs it.

Each backend answers (``Backend.missing_engine``), which may take seconds:
call from a worker thread in a UI."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from lab.api import MissingEngine
from lab.base.textsafe import printable
from lab.profile.errors import Source, key_path

if TYPE_CHECKING:
    from lab.base.profile import Profile
    from lab.registry import Registry


@dataclass(frozen=True)
class EngineProblem:
    """Arms that cannot load because their engine is missing."""

    arms: tuple[str, ...]
    backend: str
    engine: str
    why: str
    install: str
    # where the first of the arms names its backend: the profile's file, line and key
    where: str = ""

    def line(self) -> str:
        """One printable line: where, which arms, what is missing, the command."""
        which = ("arm " if len(self.arms) == 1 else "arms ") + ", ".join(self.arms)
        fix = f"; install it with: {self.install}" if self.install else ""
        at = f"{self.where} " if self.where else ""
        return printable(f"{at}{which} (backend {self.backend}): engine {self.engine} cannot load: {self.why}{fix}")


def missing_engines(profile: Profile, registry: Registry) -> list[EngineProblem]:
    """Every engine the profile's arms need that cannot load here, in arm
    order, one problem per backend and answer; empty: every engine can load.
    A backend whose own check fails is a problem named after it."""
    found: dict[tuple[str, MissingEngine], list[str]] = {}
    where: dict[tuple[str, MissingEngine], str] = {}
    src = Source(profile.path, profile.source)
    entries = list(dict.fromkeys(a.group for a in profile.arms))
    for arm in profile.arms:
        try:
            missing = registry.backend(arm.backend).missing_engine(arm.options)
        except Exception as exc:  # noqa: BLE001 - a plugin's bug is reported as its problem
            missing = MissingEngine(arm.backend, f"its missing_engine check failed: {type(exc).__name__}: {exc}", "")
        if missing is not None:
            found.setdefault((arm.backend, missing), []).append(arm.name)
            key: list[str | int] = ["arms", entries.index(arm.group), "backend"]
            line = src.locator.find(key)
            where.setdefault((arm.backend, missing), f"{profile.path}:{line}: [{key_path(key)}]" if line else "")
    return [EngineProblem(tuple(arms), backend, m.engine, m.why, m.install, where[(backend, m)])
            for (backend, m), arms in found.items()]
