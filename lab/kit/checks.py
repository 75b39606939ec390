"""What a plugin's ``lab_doctor_checks`` hook builds its checks from."""

from __future__ import annotations

import importlib.util
from importlib.metadata import PackageNotFoundError, version

from lab.api import Check


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
