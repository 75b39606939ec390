"""The memory budgets read on this machine (lab.telemetry.budget), and the
Metal one from what macOS and MLX say."""

from __future__ import annotations

import subprocess

import psutil
import pytest

from lab.telemetry import budget
from lab.telemetry.gpu import open_reader


def test_the_cpu_budget_is_the_ram_the_system_calls_available() -> None:
    got = budget.cpu_budget()
    vm = psutil.virtual_memory()
    assert got.where == "cpu" and got.total == vm.total
    assert 0 < got.bytes <= vm.total
    assert abs(got.bytes - vm.available) < vm.total * 0.05  # read moments apart


def test_the_cuda_budget_is_there_exactly_when_a_card_answers() -> None:
    reader = open_reader()
    got = budget.cuda_budget()
    if reader is None:
        assert got is None
        return
    sample = reader.read()[0]
    reader.close()
    assert got is not None and got.where == "cuda" and got.total == sample.memory_total_bytes
    assert 0 <= got.bytes <= sample.memory_total_bytes


def test_the_accelerator_here_matches_the_readers() -> None:
    place = budget.accelerator()
    if budget.is_apple_silicon():
        assert place == "metal" and budget.metal_budget() is not None
    else:
        assert budget.metal_budget() is None
        assert place == ("cuda" if budget.cuda_budget() is not None else "cpu")


def _sysctl(values: dict[str, int | None]):
    return lambda name: values.get(name)


def test_metal_takes_a_set_wired_limit_and_warns_at_the_recommended_working_set() -> None:
    ram = 24 << 30
    info = lambda: {"max_recommended_working_set_size": 16 << 30, "device_name": "Apple M4"}  # noqa: E731
    got = budget.metal_budget(info, _sysctl({"iogpu.wired_limit_mb": 20000}), ram=ram)
    assert got is not None and got.bytes == 20000 << 20 and "iogpu.wired_limit_mb = 20000" in got.source
    assert got.soft == 16 << 30 and "Apple M4" in got.detail


def test_metal_without_a_set_limit_takes_macos_default() -> None:
    ram = 24 << 30
    got = budget.metal_budget(lambda: None, _sysctl({"iogpu.wired_limit_mb": 0}), ram=ram)
    assert got is not None and got.bytes == int(ram * 0.75) and "default" in got.source
    assert got.soft is None and "not read" in got.detail


def test_sysctl_reads_integers_and_nothing_else() -> None:
    def run(out: str, rc: int = 0):
        return lambda *a, **k: subprocess.CompletedProcess(a, rc, out, "")

    assert budget.sysctl_int("x", run("24576\n")) == 24576
    assert budget.sysctl_int("x", run("", 1)) is None
    assert budget.sysctl_int("x", run("abc")) is None

    def missing(*a: object, **k: object) -> subprocess.CompletedProcess[str]:
        raise FileNotFoundError("sysctl")

    assert budget.sysctl_int("x", missing) is None


@pytest.mark.slow
def test_mlx_device_info_reads_in_a_child_interpreter() -> None:
    pytest.importorskip("mlx.core", reason="MLX is not installed here (bash scripts/setup.sh mlx)")
    info = budget.mlx_device_info()
    assert isinstance(info, dict) and info  # on a CPU build: its architecture and name, no memory sizes
