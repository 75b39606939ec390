"""Where MLX runs, and the line that installs it there: Apple silicon macOS
(MLX on Metal) and Linux on x86-64 or arm64 (MLX's CPU build: pyproject's
mlx extra asks ``mlx[cpu]`` on Linux, so one set-up line serves both).
Elsewhere a backend on MLX is unavailable: nothing to install, and ``lab
doctor`` says so instead of giving a fix."""

from __future__ import annotations

import platform

# MLX (Metal on a Mac, its CPU build on Linux), mlx-lm and dflash-mlx, from the project's lock
INSTALL = "bash scripts/setup.sh mlx"
_LINUX_MACHINES = ("x86_64", "amd64", "aarch64", "arm64")


def _here() -> tuple[str, str]:
    return platform.system(), platform.machine().lower()


def unavailable() -> str | None:
    """Why MLX cannot run on this machine, or None where it can."""
    system, machine = _here()
    if system == "Darwin" and machine == "arm64":
        return None
    if system == "Linux" and machine in _LINUX_MACHINES:
        return None
    return (f"unavailable here: MLX runs on Apple silicon macOS and on Linux (its CPU build), not on "
            f"{system or 'this system'} {machine or ''}".rstrip())


def install_line() -> str:
    """The one command that installs MLX and mlx-lm here ("" where MLX cannot run)."""
    return "" if unavailable() else INSTALL
