"""The house rules that tools can check: ruff on the tree, mypy on the core
and the built-in plugins, and no engine or Textual import at module level in
the core."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_is_clean() -> None:
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "lab", "plugins", "tests", "benchmarks", "examples"],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.slow
def test_mypy_is_clean() -> None:
    packages = ["lab", "lab_llamacpp", "lab_drafters", "lab_llamacpp_server", "lab_mlx", "lab_mlx_lm", "lab_zlab_dflash",
                "lab_dflash_mlx"]
    args = [arg for p in packages for arg in ("-p", p)]
    env = {**os.environ, "MYPYPATH": str(ROOT / "plugins")}
    # The machine's cache, not the checkout's: a fresh clone checks only what
    # differs from the last tree checked here (mypy compares each file's hash).
    from lab.base.machine import cache_path

    cache = ["--cache-dir", str(cache_path("mypy"))]
    out = subprocess.run([sys.executable, "-m", "mypy", *cache, *args], cwd=ROOT, capture_output=True, text=True,
                         env=env)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.slow
def test_core_imports_no_engine_and_no_textual() -> None:
    code = (
        "import sys, importlib, pkgutil, lab\n"
        "for m in pkgutil.walk_packages(lab.__path__, 'lab.'):\n"
        "    if not m.name.startswith('lab.tui'):\n"
        "        importlib.import_module(m.name)\n"
        "from lab.registry import load_registry\n"
        "load_registry()\n"
        "print(sorted(x for x in ('textual', 'llama_cpp', 'mlx', 'mlx_lm', 'httpx') if x in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
