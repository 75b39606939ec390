"""Facts about the machine the lab runs on: the cores this process may use,
the CPU's name, and where the lab keeps what it caches."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Any


def available_cores() -> int:
    """CPU cores this process may run on (its affinity set, else the logical
    count): the engines' default thread count."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1  # pragma: no cover - macOS


def cpu_name() -> str:
    """The CPU's model name, as the system reports it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_bytes() -> int | None:
    """The machine's physical memory, or None where it cannot be read."""
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except Exception:  # noqa: BLE001 - an unreadable figure is not recorded
        return None


def machine_info() -> dict[str, Any]:
    """What a saved probe records of the machine that measured it."""
    return {
        "platform": platform.platform(), "machine": platform.machine(), "cpu_count": os.cpu_count(),
        "cpu": cpu_name(),
    }


def cache_path(part: str) -> Path:
    """``part`` of the lab's cache (created): under ``$LAB_CACHE_DIR`` or
    ``$XDG_CACHE_HOME/speclab``."""
    root = os.environ.get("LAB_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "speclab"
    )
    path = Path(root) / part
    path.mkdir(parents=True, exist_ok=True)
    return path


def own_tool(name: str) -> str:
    """How to run ``name`` (``pip``, ``lab``, ...) from the lab's own
    environment: the script beside this interpreter, else ``<python> -m
    pip`` for pip and the bare name for the rest."""
    here = Path(sys.executable).parent
    tool = here / name
    if tool.exists():
        return _short(tool)
    if name == "pip":
        return f"{_short(Path(sys.executable))} -m pip"
    return name


def _short(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
