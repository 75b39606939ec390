"""Skips for tests whose engine this machine lacks, each with its reason
and the set-up command that installs it (CI installs them all)."""

from __future__ import annotations

import os
import sys

import pytest


def vllm_python() -> str:
    """The interpreter with vLLM: the lab's own unless LAB_VLLM_PYTHON names another."""
    return os.environ.get("LAB_VLLM_PYTHON") or sys.executable


def need_vllm() -> str:
    """Skip unless vLLM runs here; returns the interpreter to run it with."""
    pytest.importorskip("lab_vllm", reason="the lab_vllm plugin is not installed here (pip install -e .)")
    from lab_vllm.install import check_install

    python = vllm_python()
    ok, detail = check_install(python)
    if not ok:
        pytest.skip(f"vLLM is not usable here: {detail} (bash scripts/setup.sh vllm)")
    return python
