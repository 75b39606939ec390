"""``lab doctor``: which engines, tools and models this machine has, and
the install line that fixes each missing one; then the memory an arm may use
here (RAM, a CUDA card's free memory, Metal's wired limit and MLX's device).

The core checks what the lab itself needs; each plugin reports its own
engines and tools through the ``lab_doctor_checks`` hook."""

from __future__ import annotations

import argparse

from lab.api import Check
from lab.cli.context import Context
from lab.kit import models
from lab.kit.checks import package_check
from lab.registry import Registry, load_registry


def add_arguments(p: argparse.ArgumentParser) -> None:
    pass


def run_checks(registry: Registry | None = None) -> list[Check]:
    """Every check, the core's first, then each plugin's in load order."""
    reg = registry if registry is not None else load_registry()
    checks = [
        package_check("pluggy", "pluggy", "pip install -e .", required=True),
        package_check("textual", "textual", "pip install -e .", required=True),
    ]
    checks.extend(reg.doctor_checks())
    try:
        path = models.embedded_smollm2()
        checks.append(Check("embedded:smollm2", True, str(path)))
    except models.ModelNotFound as exc:
        # the fix goes on its own line, once
        checks.append(Check("embedded:smollm2", False, str(exc).split(" (fix: ")[0], exc.fix))
    # the built-in models a profile may name, embedded:smollm2 among them: the count `lab check` and
    # `lab plugins` give (lab.kit.models.known_models)
    checks.append(Check("plugins", not reg.errors, f"{len(reg.backends)} backends, {len(reg.drafters)} drafters, "
                        f"{len(models.known_models())} built-in models"
                        + (f"; load errors: {', '.join(e.entry_point for e in reg.errors)}" if reg.errors else ""),
                        "see `lab plugins`"))
    checks.extend(memory_checks())
    return checks


def memory_checks() -> list[Check]:
    """The budgets ``lab check`` holds arms to: RAM, and the accelerator's
    (a CUDA card's free memory, or on Apple silicon the GPU wired limit
    with Metal's recommended working set as MLX reads it)."""
    from lab.telemetry import budget

    ram = budget.cpu_budget()
    out = [Check("memory: RAM", True, f"{ram.line()} for an arm on the CPU")]
    metal = budget.metal_budget()
    if metal is not None:
        out.append(Check("memory: Metal", True, f"{metal.line()} for an arm on Metal"))
        return out
    cuda = budget.cuda_budget()
    if cuda is not None:
        out.append(Check("memory: CUDA", True, f"{cuda.line()} for an arm offloaded to it"))
    else:
        out.append(Check("memory: accelerator", True, "none here (no NVIDIA card answers NVML or nvidia-smi, not "
                         "Apple silicon): arms that offload run on the CPU, within RAM"))
    return out


def run(args: argparse.Namespace, ctx: Context) -> int:
    ok = True
    for check in run_checks(ctx.registry):
        mark = "ok " if check.ok else "-- "
        print(f"{mark} {check.name}: {check.detail}")
        if not check.ok:
            ok = False if check.required else ok
            if check.fix:
                print(f"      fix: {own_tools(check.fix)}")
    return 0 if ok else 1


def own_tools(fix: str) -> str:
    """A fix line with a leading ``pip``/``lab`` (and each after ``&&``)
    naming the lab's own environment's tool, so it cannot land in a system
    Python; other commands (``bash scripts/setup.sh``) are left as given."""
    from lab.base.machine import own_tool

    parts = []
    for part in fix.split("&&"):
        lead = part.lstrip()
        for tool in ("pip", "lab"):
            if lead == tool or lead.startswith(tool + " "):
                part = part[:len(part) - len(lead)] + own_tool(tool) + lead[len(tool):]
                break
        parts.append(part)
    return "&&".join(parts)
