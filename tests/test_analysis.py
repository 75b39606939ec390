"""Verdict boundaries, bootstrap on known data, per-position acceptance,
the prediction, greedy divergence and the roofline."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from lab.analysis import equivalence, predict, stats
from lab.analysis import measured_acceptance as acceptance
from lab.analysis.roofline import Roofline
from lab.base import economics as breakeven
from lab.base.probe import Probe, ProbeError, format_widths, parse_widths
from lab.base.verdict import SPEEDUP, judge, verdict, verdict_kind


def _row(**kw: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "status": "ok", "is_baseline": False, "steps": 100, "drafted": 300, "n_max": 3, "max_yield": 4,
        "step_s": 0.02, "step_cost_tokens": 2.0, "mean_accepted_len": 3.0, "speedup": 1.4,
        "acceptance_rate": 2 / 3,
    }
    row.update(kw)
    return row


# -- verdict boundaries ---------------------------------------------------------

def test_cost_equal_to_max_yield_is_structural() -> None:
    assert verdict_kind(_row(step_cost_tokens=4.0, speedup=0.9)) == breakeven.STRUCTURAL
    assert verdict_kind(_row(step_cost_tokens=3.999, speedup=0.9, mean_accepted_len=2.5)) == breakeven.LOSES


def test_a_measured_gain_is_never_called_a_loss_and_the_line_says_the_cost_disagrees() -> None:
    # a cost at the yield ceiling says it cannot pay, the measured speedup says
    # it did: the verdict follows the measurement and names the conflict
    row = _row(step_cost_tokens=5.0, speedup=1.1)
    v = judge(row)
    assert v.kind == breakeven.PAYS and v.evidence == SPEEDUP and not v.any_load
    assert "step cost as timed, 5.00 baseline tokens against at most 4 landed, says it cannot pay" in v.line
    assert "measured speedup is the evidence" in v.line
    for speedup in (1.001, 1.01, 1.3):
        assert judge(_row(step_cost_tokens=5.0, speedup=speedup)).kind not in (breakeven.LOSES, breakeven.STRUCTURAL)
        assert judge(_row(step_cost_tokens=3.0, mean_accepted_len=1.5, speedup=speedup)).kind not in (
            breakeven.LOSES, breakeven.STRUCTURAL)


@pytest.mark.parametrize(
    ("speedup", "kind"),
    [(1.02, breakeven.PAYS), (1.0199, breakeven.EVEN), (1.0, breakeven.EVEN), (0.9801, breakeven.EVEN),
     (0.98, breakeven.LOSES), (0.5, breakeven.LOSES)],
)
def test_speedup_band_edges(speedup: float, kind: str) -> None:
    row = _row(speedup=speedup, mean_accepted_len=1.5) if kind == breakeven.LOSES else _row(speedup=speedup)
    assert verdict_kind(row) == kind


def test_loses_names_the_acceptance_it_would_need() -> None:
    # cost 3 tokens, 3 drafted per step: needs 1 + 3a > 3, a = 2/3
    line = verdict(_row(step_cost_tokens=3.0, speedup=0.8, mean_accepted_len=2.0, acceptance_rate=1 / 3))
    assert line.startswith("loses at this acceptance")
    assert "break-even needs 3.00, i.e. 67% acceptance" in line and "33% accepted" in line


def test_needed_acceptance_uses_drafted_per_step() -> None:
    econ = breakeven.economics(_row(step_cost_tokens=2.0, steps=100, drafted=200))
    assert econ is not None and econ.needed_acceptance == pytest.approx(0.5)
    assert econ.break_even_len == pytest.approx(2.0)
    assert econ.baseline_token_s == pytest.approx(0.01)


def test_losing_with_steps_that_pay_blames_the_rest() -> None:
    assert "outside the steps" in verdict(_row(step_cost_tokens=2.0, mean_accepted_len=3.0, speedup=0.9))


def test_failures_baselines_and_missing_pieces() -> None:
    assert verdict({"status": "oom", "detail": "Compute error.\nmore"}) == "failed: oom (Compute error.)"
    assert verdict_kind({"status": "crashed"}) == breakeven.FAILED
    assert verdict({"status": "ok", "is_baseline": True}) == "baseline"
    assert verdict_kind(_row(steps=0)) == breakeven.NO_STEPS
    assert verdict_kind(_row(speedup=None)) == breakeven.NO_BASELINE


# -- statistics -------------------------------------------------------------------

def test_bootstrap_of_constant_ratios_is_a_point() -> None:
    iv = stats.bootstrap_geomean([1.25] * 6)
    assert iv.estimate == pytest.approx(1.25) and iv.low == pytest.approx(1.25) and iv.high == pytest.approx(1.25)


def test_bootstrap_averages_ratios_geometrically() -> None:
    iv = stats.bootstrap_geomean([2.0, 0.5])
    assert iv.estimate == pytest.approx(1.0)
    assert iv.low == pytest.approx(0.5) and iv.high == pytest.approx(2.0)


def test_bootstrap_interval_matches_theory_on_known_data() -> None:
    # log-ratios ~ N(log 1.3, 0.2): the 95% interval of the mean is about
    # +-1.96 * 0.2 / sqrt(n) in log space.
    rng = np.random.default_rng(7)
    n = 200
    logs = rng.normal(math.log(1.3), 0.2, n)
    iv = stats.bootstrap_geomean(list(np.exp(logs)))
    half = (math.log(iv.high) - math.log(iv.low)) / 2
    assert half == pytest.approx(1.96 * logs.std(ddof=1) / math.sqrt(n), rel=0.15)
    assert iv.low < iv.estimate < iv.high
    assert iv.estimate == pytest.approx(math.exp(logs.mean()))
    assert stats.bootstrap_geomean(list(np.exp(logs))) == iv  # seeded: a report renders the same twice


def test_bootstrap_interval_covers_the_truth_about_95_percent_of_the_time() -> None:
    rng = np.random.default_rng(11)
    hits = 0
    trials = 100
    for i in range(trials):
        ratios = np.exp(rng.normal(math.log(0.8), 0.3, 40))
        iv = stats.bootstrap_geomean(list(ratios), resamples=1500, seed=i)
        hits += iv.low <= 0.8 <= iv.high
    assert 85 <= hits <= 99


@pytest.mark.parametrize(
    ("ratios", "call"),
    [([1.5, 1.6, 1.55], stats.FASTER), ([0.5, 0.6], stats.SLOWER), ([0.8, 1.3], stats.DISAGREE),
     ([0.8, 1.3, 1.1, 0.9, 1.2], stats.TOO_WIDE), ([1.05, 1.01], stats.TOO_FEW),
     ([1.0, 1.01, 0.995], stats.EVEN), ([1.2], stats.ONE_PAIR), ([], stats.NO_PAIRS)],
)
def test_calls(ratios: list[float], call: str) -> None:
    assert stats.call_speedup(ratios).call == call


def test_pairs_by_prompt_and_round_and_skips_warmup_and_failures() -> None:
    rows = [
        {"arm": "b", "prompt": "p", "round": r, "status": "ok", "tok_per_s": 10.0 * r, "baseline_arm": None}
        for r in (0, 1, 2, 3)
    ] + [
        {"arm": "s", "prompt": "p", "round": 0, "status": "ok", "tok_per_s": 99.0, "baseline_arm": "b"},
        {"arm": "s", "prompt": "p", "round": 1, "status": "ok", "tok_per_s": 15.0, "baseline_arm": "b"},
        {"arm": "s", "prompt": "p", "round": 2, "status": "ok", "tok_per_s": 30.0, "baseline_arm": "b"},
        {"arm": "s", "prompt": "p", "round": 3, "status": "oom", "tok_per_s": None, "baseline_arm": "b"},
    ]
    assert stats.paired_ratios(rows, "s") == [("p", 1, 1.5), ("p", 2, 1.5)]


def test_spread_flags_noisy_rounds() -> None:
    s = stats.spread([100.0, 105.0, None])
    assert s is not None and s.median == 102.5 and not s.too_wide
    wide = stats.spread([100.0, 130.0])
    assert wide is not None and wide.too_wide


# -- acceptance per position and the prediction ------------------------------------

def _steps(pairs: list[tuple[int, int]]) -> list[dict[str, Any]]:
    return [{"arm": "a", "prompt": "p", "round": 1, "drafted": d, "accepted": a} for d, a in pairs]


def test_per_position_counts() -> None:
    pa = acceptance.per_position(_steps([(3, 3), (3, 1), (3, 0), (2, 2)]))
    # position 1 reached by all 4, accepted by 3; position 2 reached by 3
    # (those with a >= 1), accepted by 2; position 3 reached only by the
    # full (3, 3) step ((2, 2) drafted two).
    assert pa.reached == (4, 3, 1)
    assert pa.accepted == (3, 2, 1)
    assert pa.rates == (0.75, pytest.approx(2 / 3), 1.0)


def test_unconditional_is_over_every_drafting_step() -> None:
    # steps (drafted, accepted): position 2 reached by 3 steps, kept by 2; the (0, 0) step drafted nothing
    pa = acceptance.per_position([{"arm": "a", "prompt": "p", "drafted": d, "accepted": a}
                       for d, a in [(3, 3), (3, 1), (3, 0), (2, 2), (0, 0)]])
    assert pa.drafting_steps == 4
    assert pa.unconditional == (0.75, 0.5, 0.25)
    assert pa.conditional == (0.75, pytest.approx(2 / 3), 1.0)
    assert acceptance.PositionAcceptance((), ()).unconditional == ()


def test_expected_landed_and_extrapolation() -> None:
    pa = acceptance.PositionAcceptance((10, 5), (5, 5))  # p1 = 0.5, p2 = 1
    assert pa.expected_landed(1) == (1.5, 0)
    assert pa.expected_landed(2) == (2.0, 0)
    assert pa.expected_landed(3) == (2.5, 1)  # p3 carried from p2


def _probe(t: list[float]) -> Probe:
    return Probe("llamacpp", "m", "decode", tuple(range(1, len(t) + 1)), (tuple(x * 0.01 for x in t),))


def test_prediction_with_free_verification_and_perfect_drafts() -> None:
    pa = acceptance.PositionAcceptance((10,) * 8, (10,) * 8)
    inputs = predict.ArmInputs(baseline_token_s=0.01, draft_s_per_token=0.0, plain_share=0.0, n_max=3)
    preds = predict.predict(pa, _probe([1.0] * 9), inputs)
    assert [p.n_max for p in preds] == list(range(1, 9))
    assert preds[2].speedup == pytest.approx(4.0)
    best = predict.best(preds)
    assert best is not None and best.n_max == 8


def test_prediction_when_verification_does_not_amortize() -> None:
    # T(w) = w: every row costs a full pass; even perfect drafts only break
    # even, and any draft cost makes every n_max lose.
    pa = acceptance.PositionAcceptance((10,) * 4, (10,) * 4)
    inputs = predict.ArmInputs(baseline_token_s=0.01, draft_s_per_token=0.001, plain_share=0.0, n_max=3)
    preds = predict.predict(pa, _probe([1.0, 2.0, 3.0, 4.0, 5.0]), inputs)
    assert all(p.speedup < 1 for p in preds)
    assert preds[2].cost == pytest.approx(4.0 + 0.3)


def test_the_loops_own_seconds_per_step_are_part_of_a_steps_cost() -> None:
    def row(overhead_s: float | None, loop_steps: int | None) -> dict[str, Any]:
        report = {} if loop_steps is None else {"loop_overhead_s": overhead_s, "loop_steps": loop_steps}
        # 10 steps of 0.05 s each costing 2.5 baseline tokens: 0.02 s a token
        return {"status": "ok", "steps": 10, "drafted": 30, "draft_s": 0.0, "step_s": 0.05,
                "step_cost_tokens": 2.5, "plain_tokens": 1, "n_max": 3, "engine_report": report}

    inputs = predict.arm_inputs([row(0.004, 10), row(0.002, 10)])
    assert inputs is not None and inputs.loop_s_per_step == pytest.approx(0.0003)
    pa = acceptance.PositionAcceptance((10,) * 4, (10,) * 4)
    with_loop = predict.predict(pa, _probe([1.0, 1.0, 1.0, 1.0, 1.0]), inputs)[2]
    assert with_loop.loop_cost == pytest.approx(0.0003 / 0.02)
    assert with_loop.cost == pytest.approx(1.0 + 0.015)
    assert with_loop.speedup == pytest.approx(4.0 / 1.015)
    # a row saved before the loop reported its steps prices no loop cost
    old = predict.arm_inputs([row(0.004, None)])
    assert old is not None and old.loop_s_per_step == 0.0


def test_prediction_picks_an_interior_n_max() -> None:
    # acceptance falls off by position while verify cost grows: the best
    # n_max is neither the first nor the last.
    pa = acceptance.PositionAcceptance((100,) * 6, (90, 80, 50, 20, 10, 5))
    inputs = predict.ArmInputs(baseline_token_s=0.01, draft_s_per_token=0.0005, plain_share=0.2, n_max=4)
    preds = predict.predict(pa, _probe([1.0, 1.1, 1.2, 1.35, 1.5, 1.7, 1.9]), inputs)
    best = predict.best(preds)
    assert best is not None and 1 < best.n_max < 6


def test_probe_interpolates_but_never_extrapolates() -> None:
    p = Probe("b", "m", "decode", (1, 2, 4), ((0.01, 0.012, 0.02),))
    assert p.t_ratio(3) == pytest.approx(1.6)
    assert p.t_ratio(5) is None
    with pytest.raises(ProbeError):
        Probe("b", "m", "decode", (2, 4), ((0.01, 0.02),))


def test_probe_round_trips_and_summarizes_repeats(tmp_path: Any) -> None:
    from lab.base import probe as probes

    p = Probe("b", "m", "decode", (1, 8), ((0.01, 0.04), (0.01, 0.05), (0.01, 0.06)), bandwidth_bytes_s=1e10, model_bytes=10**8)
    assert p.t_range(8) == (4.0, 5.0, 6.0)
    assert p.batch_ratio(8) == pytest.approx((8 / 6, 8 / 5, 8 / 4))
    path = probes.save(p, tmp_path)
    assert path.name == "probe.json"
    assert probes.load(tmp_path) == p
    assert "batch-8/batch-1 throughput: 1.60x" in p.render()


def test_parse_widths() -> None:
    assert parse_widths("1-4,8") == (1, 2, 3, 4, 8)
    assert parse_widths("2,4") == (1, 2, 4)
    assert format_widths(parse_widths("1-4,8,16")) == "1-4,8,16"
    with pytest.raises(ProbeError):
        parse_widths("a-b")


# -- greedy equivalence and roofline --------------------------------------------------

def test_divergence_quotes_the_write_up_way() -> None:
    base = "Lighthouses matter. More critically, they guide ships home."
    out = "Lighthouses matter. Furthermore, they guide ships home."
    d = equivalence.divergence(base, out, [1, 2, 3, 4], [1, 2, 9, 4])
    assert d is not None
    assert d.char == base.index("More")
    assert d.token == 2
    assert d.before == "Lighthouses matter."
    assert d.baseline.startswith("More critically,") and d.output.startswith("Furthermore,")
    assert equivalence.divergence(base, base) is None


def test_divergence_mid_word_shows_whole_words() -> None:
    d = equivalence.divergence("the cat sat", "the car sat")
    assert d is not None and d.char == 6
    assert d.baseline.startswith("cat") and d.output.startswith("car") and d.before == "the"
    short = equivalence.divergence("abc", "abcdef")
    assert short is not None and short.char == 3


def test_roofline() -> None:
    r = Roofline(model_bytes=100 * 2**20, bandwidth_bytes_s=10e9, bandwidth_source="given", baseline_tok_per_s=50.0)
    assert r.bound_tok_per_s == pytest.approx(10e9 / (100 * 2**20))
    assert r.fraction == pytest.approx(50.0 / r.bound_tok_per_s)
    assert "100 MiB" in r.line()
