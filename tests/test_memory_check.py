"""A saved run's arms, expected beside measured (lab.analysis.memory_check)
and the report's table: what a row says when the two part ways."""

from __future__ import annotations

from typing import Any

from lab.analysis.memory_check import markdown_lines, peak_checks, run_place, saved_arms
from lab.base.footprint import MIB

RUN = {"max_tokens": 16, "n_ctx": 4096, "rounds": 1, "a_key_of_a_later_lab": 1}


def arm(name: str, backend: str = "llamacpp", **more: Any) -> dict[str, Any]:
    return {"name": name, "backend": backend, "model": "embedded:smollm2", "drafter": None, "n_max": None,
            "options": {}, "drafter_options": {}, "baseline": None, "is_baseline": True, "stack": backend,
            "group": name, "acceptance": {"kind": "rate", "value": 0.5, "prompt": None}, **more}


def row(name: str, peak: int | None, status: str = "ok", **more: Any) -> dict[str, Any]:
    return {"arm": name, "status": status, "peak_mem_bytes": peak, "prompt_tokens": 50, "n_tokens": 16, **more}


def test_saved_profiles_read_back_what_sizes_memory() -> None:
    run, arms = saved_arms({"run": RUN, "arms": [arm("a"), "not an arm"]})
    assert run.n_ctx == 4096 and [a.name for a in arms] == ["a"] and arms[0].acceptance is None


def test_where_a_saved_run_ran() -> None:
    assert run_place([{"gpu_name": None}], {"platform": "Linux-6.1-x86_64"}) == "cpu"
    assert run_place([{"gpu_name": "NVIDIA H100"}], None) == "cuda"
    assert run_place([], {"platform": "macOS-15.1-arm64-arm-64bit"}) == "metal"


def test_each_row_says_why_where_it_strays(registry: Any) -> None:
    # at a short context SmolLM2's estimate is mostly the measured process
    short = {**RUN, "n_ctx": 512}
    data = {"profile": {"run": short, "arms": [arm("near"), arm("far"), arm("failed"), arm("gone", backend="nope"),
                                             arm("vllm", backend="vllm")]},
            "results": []}
    first = {c.arm: c for c in peak_checks({**data, "results": [row("near", 1)]}, registry)}
    expected = first["near"].expected
    assert expected is not None and first["near"].where == "cpu"
    data["results"] = [row("near", int(expected * 1.05)), row("far", int(expected * 1.4)),
                       row("failed", int(expected * 0.5), status="oom"), row("gone", 1), row("vllm", 900 * MIB)]
    checks = {c.arm: c for c in peak_checks(data, registry)}
    assert "gone" not in checks  # a backend not installed here says nothing
    assert checks["near"].within and checks["near"].why == ""
    assert checks["far"].within is False and "mostly the process" in checks["far"].why
    assert "cells ended oom" in checks["failed"].why
    assert "vLLM takes its share" in checks["vllm"].why
    table = markdown_lines(list(checks.values()))
    assert "| arm | where | expected | measured peak | measured / expected | note |" in table
    assert any(line.startswith("| near | cpu |") and "| 1.05 |" in line for line in table), table
    assert markdown_lines([]) == []


def test_a_process_the_run_measured_before_loading_takes_the_constants_place(registry: Any) -> None:
    """A build of the interpreter's imports that holds 300 MiB more (a CUDA
    torch under an MLX tokenizer) moves the measured peak and, with the
    process measured before the model loaded, the expected one with it."""
    data = {"profile": {"run": RUN, "arms": [arm("a")]}, "results": [row("a", 1)]}
    plain = peak_checks(data, registry)[0]
    assert plain.expected is not None and plain.estimate is not None
    process = next(p for p in plain.estimate.parts if p.name == "process")
    heavier = process.bytes + 300 * MIB
    peak = plain.expected + 300 * MIB
    data["results"] = [row("a", peak)]
    assert peak_checks(data, registry)[0].within is False  # the constant alone misses it
    data["results"] = [row("a", peak, process_bytes=heavier - (process.bytes - 50 * MIB))]
    measured = peak_checks(data, registry)[0]
    assert measured.within and measured.expected == plain.expected + 300 * MIB
    assert "measured in this run" in next(p for p in measured.estimate.parts if p.name == "process").how  # type: ignore[union-attr]
