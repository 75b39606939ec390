"""The write-ups' published inputs, through the lab's own analysis code,
reproduce their published conclusions."""

from __future__ import annotations

from typing import Any

import pytest
from lab_llamacpp.probe import parse_batched_bench, pass_seconds_from_bench

from lab.base import economics as breakeven
from lab.base.events import STEP_ONLY, Cell, StepEvent
from lab.base.probe import Probe
from lab.base.profile import Arm
from lab.rows.build import build_result

BASELINE_TPS = 6.00  # "today's baseline did reproduce it exactly (6.00 vs 6.00 tok/s)"


def _arm(name: str, n_max: int | None) -> Arm:
    return Arm(
        name=name, backend="llamacpp-server", model="Qwen3.8-27B-UD-Q4_K_S.gguf",
        drafter=None if n_max is None else "draft-dflash", n_max=n_max, options={}, drafter_options={},
        baseline=None if n_max is None else "baseline", is_baseline=n_max is None, stack="llamacpp", group=name,
    )


def _published_row(gen_s: float, n_steps: int, accepted_per_step: list[int], prompt: str) -> dict[str, Any]:
    """A dflash n-max 3 row the way the lab would record it: every step takes
    the average step time, accepting as the server logged."""
    step_s = gen_s / n_steps
    steps = [
        StepEvent(Cell("dflash3", prompt, 1), i + 1, drafted=3, accepted=a, landed=a + 1,
                  draft_s=None, verify_s=None, step_s=step_s, clocks=STEP_ONLY)
        for i, a in enumerate(accepted_per_step)
    ]
    n_tokens = sum(s.landed for s in steps)
    baseline = {"tok_per_s": BASELINE_TPS, "text": None}
    return build_result(
        arm=_arm("dflash3", 3), prompt=prompt, round=1, status="ok", steps=steps,
        n_tokens=n_tokens, gen_s=gen_s, baseline=baseline,
    )


def test_prose_step_arithmetic_from_totals() -> None:
    # 133.9 s / 174 speculative steps (400 - 226 accepted) = 0.77 s per step
    econ = breakeven.from_totals(133.9, 400, 226, BASELINE_TPS, n_max=3)
    assert round(econ.step_s, 2) == 0.77
    assert round(econ.baseline_token_s, 3) == 0.167
    assert round(econ.cost_tokens, 1) == 4.6
    assert econ.max_yield == 4
    assert econ.structural
    # "Even at 100% acceptance ... 0.77 / 4 = 0.19 s/token, worse than 0.167"
    assert round(econ.step_s / econ.max_yield, 2) == 0.19
    assert econ.needed_acceptance is not None and econ.needed_acceptance > 1


def test_code_step_arithmetic_from_totals() -> None:
    # 86.3 s / 115 speculative steps (400 - 285 accepted) = 0.75 s per step
    econ = breakeven.from_totals(86.3, 400, 285, BASELINE_TPS, n_max=3)
    assert round(econ.step_s, 2) == 0.75
    assert round(econ.mean_accepted_len or 0, 1) == 3.5  # "mean len = 3.50 in the server log"
    assert econ.cost_tokens >= econ.max_yield == 4
    assert econ.structural


def test_prose_row_is_a_structural_loss() -> None:
    # 226 accepted over 174 steps: 52 steps accept 2, 122 accept 1
    row = _published_row(133.9, 174, [2] * 52 + [1] * 122, "prose")
    assert row["n_tokens"] == 400
    assert round(row["step_s"], 2) == 0.77
    assert round(row["step_cost_tokens"], 1) == 4.6
    assert row["max_yield"] == 4
    assert round(row["speedup"], 2) == 0.50  # 2.98-3.01 tok/s: -50%
    assert breakeven.classify(row).kind == breakeven.STRUCTURAL
    assert row["verdict"].startswith("structural loss")
    assert "4.62" in row["verdict"] and "at most 4" in row["verdict"]


def test_code_row_is_a_structural_loss_despite_high_acceptance() -> None:
    # 285 accepted over 115 steps: 55 steps accept 3, 60 accept 2
    row = _published_row(86.3, 115, [3] * 55 + [2] * 60, "code")
    assert row["acceptance_rate"] == pytest.approx(285 / 345)
    assert round(row["mean_accepted_len"], 1) == 3.5
    assert round(row["step_s"], 2) == 0.75
    assert round(row["speedup"], 2) == 0.77  # -23%
    assert row["verdict"].startswith("structural loss")


def test_mtp_batched_bench_amortization_is_1_13x() -> None:
    # Part two: batch-1 decode 6.10 tok/s, batch-8 aggregate 6.90 tok/s.
    table = """
|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |
|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|
|   128 |    128 |    1 |    256 |    2.000 |    64.00 |   20.984 |     6.10 |   22.984 |    11.14 |
|   128 |    128 |    8 |   2048 |   16.000 |    64.00 |  148.406 |     6.90 |  164.406 |    12.46 |
"""
    rows = parse_batched_bench(table)
    assert [int(r["pl"]) for r in rows] == [1, 8]
    seconds = pass_seconds_from_bench(rows, [1, 8])
    probe = Probe("llamacpp", "Qwen3.8-27B", "batched-bench", (1, 8), (tuple(seconds),))
    lo, med, hi = probe.batch_ratio(8) or (0, 0, 0)
    assert round(med, 2) == 1.13 and lo == med == hi
    # "Verifying 8 rows on Metal costs roughly 7 full forward passes"
    assert round(probe.t_ratio(8) or 0) == 7


def test_the_cuda_figure_is_not_a_dead_end() -> None:
    # CUDA amortizes 3.34x at batch 8: verifying 8 rows costs 2.4 passes, so a
    # step at n-max 7 with a free drafter can pay.
    probe = Probe("llamacpp", "q", "batched-bench", (1, 8), ((1.0, 8 / 3.34),))
    econ = breakeven.StepEconomics(step_s=probe.t_ratio(8) or 0, baseline_token_s=1.0, n_max=7)
    assert not econ.structural
    assert round(econ.cost_tokens, 1) == 2.4
