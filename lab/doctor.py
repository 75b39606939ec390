"""`lab doctor`: which engines, tools and models this machine has, and the
install line that fixes each missing one.

The core checks what the lab itself needs; each plugin reports its own
engines and tools through the ``lab_doctor_checks`` hook."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version


@dataclass(frozen=True)
class Check:
    """One line of ``lab doctor``: ``fix`` is the install line for a failed
    check; a failed ``required`` one makes the command fail."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = False


def package_check(dist: str, module: str, fix: str, required: bool = False) -> Check:
    """Whether the distribution ``dist`` (imported as ``module``) is
    installed, and its version; for plugins' checks too."""
    if importlib.util.find_spec(module) is None:
        return Check(dist, False, "not installed", fix, required)
    try:
        v = version(dist)
    except PackageNotFoundError:
        v = "?"
    return Check(dist, True, f"{v}", "", required)


def run_checks() -> list[Check]:
    from lab import models
    from lab.plugins import load_registry

    checks = [
        package_check("pluggy", "pluggy", "pip install -e .", required=True),
        package_check("textual", "textual", "pip install -e .", required=True),
    ]
    reg = load_registry()
    checks.extend(reg.doctor_checks())
    try:
        path = models.embedded_smollm2()
        checks.append(Check("embedded:smollm2", True, str(path)))
    except models.ModelNotFound as exc:
        checks.append(Check("embedded:smollm2", False, str(exc), exc.fix))
    checks.append(Check("plugins", not reg.errors, f"{len(reg.backends)} backends, {len(reg.drafters)} drafters, "
                        f"{len(reg.models)} models"
                        + (f"; load errors: {', '.join(e.entry_point for e in reg.errors)}" if reg.errors else ""),
                        "see `lab plugins`"))
    return checks
