"""Every benchmark in benchmarks/ runs end to end at a tiny size and prints
the lines that carry its ratios: a refactor that breaks one fails here, not
on the next machine that measures with it. The figures themselves are not
checked (a tiny run on a busy machine measures nothing worth asserting)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NUMBER = r"-?[\d,]+(?:\.\d+)?"
# spread() in benchmarks/common.py: "min X  median Y  max Z" or "min X / median Y / max Z"
SPREAD = rf"min {NUMBER}\s*/?\s*median {NUMBER}\s*/?\s*max {NUMBER}"

pytestmark = pytest.mark.slow


def bench(*argv: str, timeout: float = 600) -> str:
    """The benchmark's standard output; a failed run fails the test with its stderr."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)
    assert done.returncode == 0, f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def lines(out: str, pattern: str) -> list[str]:
    return [line for line in out.splitlines() if re.search(pattern, line)]


def need_llama_tool(name: str) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (bash scripts/setup.sh)")
    from lab.kit.llama_tools import find_llama_tool

    if not find_llama_tool(name):
        pytest.skip(f"{name} is not built here (bash scripts/setup.sh all,test)")


@pytest.mark.engine
def test_decode_overhead_prints_its_ratio_and_loop_overhead() -> None:
    need_llama_tool("llama-bench")
    out = bench("benchmarks.decode_overhead", "--repeats", "2", "--tokens", "8", "--threads", "1", "--split",
                "--variants", "fresh,process")
    assert len(lines(out, rf"^repeat \d \(.*first\): llama-bench tg8 {NUMBER} tok/s, lab baseline .*ratio {NUMBER}")) == 2, out
    assert len(lines(out, rf"^lab / llama-bench ratio:\s+{SPREAD}")) == 2, out
    assert len(lines(out, rf"^speculative loop overhead: {SPREAD} us per step")) == 2, out
    assert len(lines(out, rf"^  launch\s+{SPREAD}")) == 2, out  # --split: the token in parts


@pytest.mark.engine
def test_mlx_overhead_prints_the_baseline_and_dflash_ratios() -> None:
    pytest.importorskip("mlx.core", reason="MLX is not installed (bash scripts/setup.sh mlx,test)")
    from lab_mlx import reference

    why = reference.available()
    if why:
        pytest.skip(f"z-lab's dflash reference is not importable: {why} (bash scripts/setup.sh all,test)")
    out = bench("benchmarks.mlx_overhead", "--models", "tiny:qwen3", "--tokens", "8", "--repeats", "1")
    assert lines(out, r"^tiny:qwen3: mlx baseline / mlx_lm generate_step$"), out
    titles = lines(out, r"^tiny:qwen3 \+ tiny:qwen3-dflash2? block 4 timing=(split|fused): mlx-dflash / reference")
    assert len(titles) == 4, out
    assert len(lines(out, rf"^  ratio\s+{SPREAD}")) == 5, out
    assert len(lines(out, rf"^  cpu-time ratio\s+{SPREAD}")) == 5, out


@pytest.mark.engine
def test_server_overhead_prints_the_streaming_tax_and_loop_parity() -> None:
    need_llama_tool("llama-server")
    out = bench("benchmarks.server_overhead", "--repeats", "1", "--tokens", "8", "--n-max", "2", "--threads", "1")
    assert lines(out, r"^1\. streaming tax: ") and lines(out, r"^2\. loop parity: "), out
    assert len(lines(out, rf"^   ratio {SPREAD}  \(n=1\)$")) == 2, out


@pytest.mark.engine
def test_lossless_repro_prints_each_configs_rows_and_speed_ratio() -> None:
    need_llama_tool("llama-bench")  # the library beside it: the repro calls llama.cpp's own API
    out = bench("benchmarks.lossless_repro", "--tokens", "12", "--width", "3", "--threads", "1",
                "--configs", "default,pad")
    got = lines(out, r"^(default|pad)\s+identical rows\s+\d+/\d+ .* argmax flips\s+\d+")
    assert [line.split()[0] for line in got] == ["default", "pad"], out
    out = bench("benchmarks.lossless_repro", "--tokens", "8", "--threads", "1", "--configs", "default,pad",
                "--speed", "1")
    assert len(lines(out, rf"^(default|pad)\s+baseline tok/s min .* median / default {NUMBER}$")) == 2, out


def test_tui_throughput_render_and_cost_print_their_rates() -> None:
    out = bench("benchmarks.tui_throughput", "render", "--seconds", "0.3", "--repeats", "1", "--rates", "500")
    assert lines(out, rf"^    rendered tok/s\s+{SPREAD}"), out
    assert lines(out, r"^\s+500: offered\s+[\d,]+\s+rendered\s+[\d,]+\s+p99 lag"), out
    assert lines(out, r"^  highest offered rate sustained with p99 lag < 50 ms: [\d,]+ tok/s"), out
    out = bench("benchmarks.tui_throughput", "cost", "--rate", "50", "--seconds", "0.3", "--repeats", "1")
    assert len(lines(out, rf"^  (idle|full|lean) .* min\s+{NUMBER} / median\s+{NUMBER} / max\s+{NUMBER}$")) == 3, out


def test_tui_throughput_overhead_prints_the_tui_to_headless_ratio() -> None:
    out = bench("benchmarks.tui_throughput", "overhead", "--fake", "--max-tokens", "6", "--rounds", "1", "--repeats", "1")
    assert lines(out, rf"^  repeat 1: median over \d+ cells of TUI tok/s / headless tok/s = {NUMBER}"), out
    assert lines(out, rf"^  ratio min {NUMBER} / median {NUMBER} / max {NUMBER}"), out


@pytest.mark.engine
def test_mac_engines_prints_the_lab_over_engine_ratios() -> None:
    for module in ("mlx_lm", "dflash", "dflash_mlx"):
        pytest.importorskip(module, reason=f"{module} is not installed (docs/mac-engines.md)")
    out = bench("benchmarks.mac_engines", "--repeats", "2", "--tokens", "8")
    assert len(lines(out, rf"^\S+ / \S+ tok/s: {SPREAD}")) == 4, out
    assert len(lines(out, rf"^\S+ / \S+ CPU s per token: {SPREAD}")) == 4, out
