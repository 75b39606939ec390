"""Where MLX runs, and the line that installs it there: Apple silicon macOS
(MLX on Metal) and Linux on x86-64 or arm64 (MLX's CPU build, ``mlx[cpu]``).
Elsewhere a backend on MLX is unavailable: nothing to install, and ``lab
doctor`` says so instead of giving a fix."""

from __future__ import annotations

import platform

# the Mac's set-up installs MLX with Metal, mlx-lm and dflash-mlx (pyproject's mlx extra)
MAC_INSTALL = "bash scripts/setup.sh mlx"
# Linux has MLX's CPU build only
LINUX_INSTALL = 'pip install "mlx[cpu]" mlx-lm'
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
    if unavailable():
        return ""
    return LINUX_INSTALL if _here()[0] == "Linux" else MAC_INSTALL
