"""The memory an arm may use where it runs, read before anything loads.

- CPU: the RAM the system calls available (psutil).
- CUDA: the first visible card's free memory (NVML, else nvidia-smi), as
  :mod:`lab.telemetry.gpu` reads it.
- Metal: what the GPU may keep wired: ``iogpu.wired_limit_mb`` where it is
  set, else macOS's default of about three quarters of RAM. Metal also
  recommends a working set (``max_recommended_working_set_size``, read through
  MLX in a child interpreter, so the lab's own process never opens the GPU);
  llama.cpp warns past it, and the write-ups' n-max 3 ran past it with that
  warning, so it is a line to warn at (``Budget.soft``), not the budget.

Each reader answers None where the place does not exist here."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from dataclasses import dataclass
from typing import Callable

from lab.base.footprint import Where, size_text

# macOS's GPU wired limit when iogpu.wired_limit_mb is 0: about this share of RAM
DEFAULT_WIRED_SHARE = 3 / 4

_MLX_CHILD = (
    "import json, mlx.core as mx\n"
    "info = mx.device_info() if hasattr(mx, 'device_info') else mx.metal.device_info()\n"
    "print(json.dumps({k: v for k, v in info.items() if isinstance(v, (int, float, str))}))\n"
)


@dataclass(frozen=True)
class Budget:
    """What one place lets an arm hold: ``bytes``, how it was read, and what
    else the reading said (a card's name and total, the wired limit)."""

    where: Where
    bytes: int
    source: str
    detail: str = ""
    total: int | None = None  # the device's whole memory, where known
    # a lower line that is advice, not a wall (Metal's recommended working set: llama.cpp warns past it)
    soft: int | None = None

    def line(self) -> str:
        extra = f"; {self.detail}" if self.detail else ""
        return f"{size_text(self.bytes)} ({self.source}{extra})"


def is_apple_silicon() -> bool:
    return platform.system() == "Darwin" and platform.machine() == "arm64"


def cpu_budget() -> Budget:
    import psutil

    vm = psutil.virtual_memory()
    return Budget("cpu", int(vm.available), "available RAM",
                  f"{size_text(vm.total)} in all", total=int(vm.total))


def cuda_budget() -> Budget | None:
    """The first visible NVIDIA card's free memory, None without one."""
    from lab.telemetry.gpu import open_reader

    reader = open_reader()
    if reader is None:
        return None
    try:
        samples = reader.read()
    finally:
        reader.close()
    if not samples:
        return None
    s = samples[0]
    free = max(0, s.memory_total_bytes - s.memory_used_bytes)
    return Budget("cuda", free, f"free on {s.name} ({reader.source})",
                  f"{size_text(s.memory_used_bytes)} of {size_text(s.memory_total_bytes)} in use",
                  total=s.memory_total_bytes)


def sysctl_int(name: str, run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run) -> int | None:
    """An integer sysctl (macOS), None where it does not exist or cannot be read."""
    try:
        done = run(["sysctl", "-n", name], capture_output=True, text=True, timeout=5, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    try:
        return int(done.stdout.strip())
    except ValueError:
        return None


def wired_limit(ram: int, sysctl: Callable[[str], int | None] = sysctl_int) -> tuple[int, str]:
    """(bytes, how it was read) of the GPU wired limit."""
    mb = sysctl("iogpu.wired_limit_mb")
    if mb:
        return mb * 2**20, f"iogpu.wired_limit_mb = {mb}"
    said = "iogpu.wired_limit_mb = 0: macOS's default" if mb == 0 else "macOS's default"
    return int(ram * DEFAULT_WIRED_SHARE), f"{said}, about 3/4 of {size_text(ram)} RAM"


def mlx_device_info(timeout: float = 60.0) -> dict[str, object] | None:
    """MLX's device facts, read in a child interpreter; None without MLX
    or where it does not answer."""
    try:
        done = subprocess.run([sys.executable, "-c", _MLX_CHILD], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    try:
        info = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    return info if isinstance(info, dict) else None


def metal_budget(info: Callable[[], dict[str, object] | None] = mlx_device_info,
                 sysctl: Callable[[str], int | None] = sysctl_int, ram: int | None = None) -> Budget | None:
    """On Apple silicon: the GPU wired limit, Metal's recommended working
    set (as MLX reads it) beside it as the line to warn at; None elsewhere."""
    if ram is None:
        if not is_apple_silicon():
            return None
        ram = sysctl("hw.memsize")
        if not ram:
            import psutil

            ram = int(psutil.virtual_memory().total)
    limit, how = wired_limit(ram, sysctl)
    device = info() or {}
    recommended = device.get("max_recommended_working_set_size")
    name = device.get("device_name") or "the Apple GPU"
    if isinstance(recommended, int) and recommended > 0:
        detail = f"Metal's recommended working set on {name} {size_text(recommended)} (MLX)"
        soft: int | None = recommended if recommended < limit else None
    else:
        detail, soft = "Metal's recommended working set not read (MLX not installed)", None
    return Budget("metal", limit, f"GPU wired limit ({how})", detail, total=ram, soft=soft)


def read_budget(where: Where) -> Budget | None:
    """The budget at ``where`` on this machine, None where there is none."""
    if where == "cpu":
        return cpu_budget()
    if where == "cuda":
        return cuda_budget()
    return metal_budget()


def accelerator() -> Where:
    """Where an arm that asks for the accelerator runs on this machine:
    Metal on Apple silicon, CUDA where a card answers, else the CPU."""
    if is_apple_silicon():
        return "metal"
    return "cuda" if cuda_budget() is not None else "cpu"
