"""The doctor's lines for the llama.cpp engine package and the tools this
plugin runs; the tools are found by :mod:`lab.kit.llama_tools`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lab.kit.llama_tools import build_command, find_llama_tool, version_line

if TYPE_CHECKING:
    from lab.api import Check


def doctor_checks() -> list[Check]:
    """The llama.cpp engine package and the tools this plugin runs
    (llama-bench and llama-batched-bench for probes and benchmarks)."""
    from lab.api import Check
    from lab.kit.checks import package_check

    checks = [package_check("llama-cpp-python", "llama_cpp", "bash scripts/setup.sh llamacpp")]
    for tool in ("llama-bench", "llama-batched-bench"):
        found = find_llama_tool(tool)
        if found:
            checks.append(Check(tool, True, f"{found[0]} ({found[1]}) {version_line(found[0])}"))
        else:
            checks.append(Check(tool, False, "not found on PATH or in this environment's llama.cpp build",
                                build_command()))
    return checks
