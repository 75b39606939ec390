"""The held-out prediction (lab.analysis.holdout) takes nothing from the row
it predicts: changing that row's own acceptance, draft or loop seconds moves
the in-sample prediction and leaves the held-out one where it was."""

from __future__ import annotations

from typing import Any

import pytest

from lab.analysis.holdout import held_out, set_positions
from lab.analysis.run import predictions
from lab.base.probe import Probe

PROBE = Probe("llamacpp", "m", "decode", (1, 2, 3, 4, 5), ((0.010, 0.011, 0.012, 0.013, 0.014),))


def _row(arm: str, n_max: int | None, draft_s: float, accepted: int, **kw: Any) -> dict[str, Any]:
    base = n_max is None
    row = {
        "arm": arm, "prompt": "p", "round": 1, "status": "ok", "backend": "llamacpp", "model": "m",
        "drafter": None if base else "draft-model", "group": arm.split("-")[0], "is_baseline": base,
        "n_max": n_max, "tok_per_s": 100.0, "baseline_arm": None if base else "base",
        "steps": None if base else 10, "drafted": None if base else 10 * n_max,
        "accepted": None if base else accepted, "step_s": None if base else 0.02,
        "step_cost_tokens": None if base else 2.0, "draft_s": None if base else draft_s,
        "plain_tokens": None if base else 1, "speedup": None if base else 1.2,
        "engine_report": {}, "set_acceptance": {},
    }
    row.update(kw)
    return row


def _steps(arm: str, n_max: int, accepted: list[int]) -> list[dict[str, Any]]:
    return [{"arm": arm, "prompt": "p", "round": 1, "drafted": n_max, "accepted": a, "landed": a + 1} for a in accepted]


def test_a_sweep_arm_is_predicted_from_its_siblings_alone() -> None:
    rows = [_row("base", None, 0, 0), _row("d-n2", 2, 0.002, 12), _row("d-n4", 4, 0.004, 20)]
    steps = _steps("d-n2", 2, [2, 1, 0, 2, 1, 2, 1, 1, 2, 0]) + _steps("d-n4", 4, [4, 2, 0, 1, 3, 4, 2, 1, 1, 2])
    before = held_out(rows, steps, "d-n2", "p", PROBE, 2)
    assert before is not None and before.acceptance_from == "d-n4" and before.costs_from == ("d-n4",)
    # the row's own figures change: its acceptance, draft seconds
    rows2 = [rows[0], _row("d-n2", 2, 0.05, 2), rows[2]]
    steps2 = _steps("d-n2", 2, [0] * 10) + steps[10:]
    after = held_out(rows2, steps2, "d-n2", "p", PROBE, 2)
    assert after is not None and after.predicted == pytest.approx(before.predicted)
    ins = {p["arm"]: p["predicted"] for p in predictions(rows, steps, PROBE)}
    ins2 = {p["arm"]: p["predicted"] for p in predictions(rows2, steps2, PROBE)}
    assert ins["d-n2"] != pytest.approx(ins2["d-n2"])


def test_set_rates_give_the_acceptance_and_nothing_else_gives_none() -> None:
    setting = {"kind": "rate", "value": 0.5, "rates": [0.5, 0.25]}
    pos = set_positions(setting)
    assert pos is not None and [round(r or 0, 6) for r in pos.rates] == [0.5, 0.5]
    rows = [_row("base", None, 0, 0), _row("s-a", 2, 0.002, 5, set_acceptance=setting),
            _row("s-b", 2, 0.002, 15, set_acceptance={"kind": "rate", "value": 0.9, "rates": [0.9, 0.81]})]
    steps = _steps("s-a", 2, [0, 1, 0, 2, 0, 0, 1, 0, 0, 1]) + _steps("s-b", 2, [2] * 10)
    h = held_out(rows, steps, "s-a", "p", PROBE, 2)
    assert h is not None and h.acceptance_from == "set rates"
    # alone, an arm has no one to take its costs from
    assert held_out(rows[:2], steps[:10], "s-a", "p", PROBE, 2) is None


def test_an_arm_of_another_draft_model_lends_nothing() -> None:
    """Two draft-model arms on one target, one drafting with a 70 %-agreement
    model: the n_max 2 arm of the first model borrows from its own model's
    n_max 4 arm only, never from the other model's (which drafts most)."""
    own = '{"drafter_options":{"model":"draft-1b"},"options":{}}'
    other = '{"drafter_options":{"model":"draft-1b-a70"},"options":{}}'
    rows = [_row("base", None, 0, 0), _row("d-n2", 2, 0.002, 12, draft_config=own),
            _row("d-n4", 4, 0.004, 20, draft_config=own), _row("e-n8", 8, 0.008, 30, draft_config=other)]
    steps = (_steps("d-n2", 2, [2, 1] * 5) + _steps("d-n4", 4, [4, 2, 0, 1, 3] * 2)
             + _steps("e-n8", 8, [0, 1] * 5))
    h = held_out(rows, steps, "d-n2", "p", PROBE, 2)
    assert h is not None and h.acceptance_from == "d-n4" and h.costs_from == ("d-n4",)
    # without its kin the arm has no held-out prediction rather than a wrong one
    alone = held_out([rows[0], rows[1], rows[3]], steps, "d-n2", "p", PROBE, 2)
    assert alone is None


def test_engine_drafting_entries_with_the_same_options_are_kin() -> None:
    """A server profile writes each n_max as its own entry (its own group);
    with the same spec type and draft model they lend to each other."""
    config = '{"drafter_options":{},"options":{"draft_model":"d.gguf","spec_type":"draft-dflash"}}'
    rows = [_row("base", None, 0, 0), _row("dflash3", 3, 0.003, 20, drafter=None, draft_config=config, group="dflash3"),
            _row("dflash7", 7, 0.007, 40, drafter=None, draft_config=config, group="dflash7")]
    steps = _steps("dflash3", 3, [3, 2] * 5) + _steps("dflash7", 7, [5, 3] * 5)
    h = held_out(rows, steps, "dflash3", "p", PROBE, 3)
    assert h is not None and h.acceptance_from == "dflash7"


def test_a_best_n_max_past_the_measured_positions_is_marked_a_guess() -> None:
    """An arm measured at n_max 1 that always lands its draft: a cheap flat
    probe makes a wider n_max look best, but only by carrying position 1's
    acceptance on; the best is flagged, and the report's column stars it."""
    from lab.render.report import _prediction_lines

    flat = Probe("llamacpp", "m", "decode", tuple(range(1, 9)), ((0.010,) * 8,))
    rows = [_row("base", None, 0, 0), _row("d-n1", 1, 0.0001, 10, step_cost_tokens=1.0)]
    steps = _steps("d-n1", 1, [1] * 10)
    [p] = predictions(rows, steps, flat)
    assert p["best_n_max"] > 1 and p["best_extrapolated"] is True
    # measured at its best: no flag
    rows4 = [_row("base", None, 0, 0), _row("d-n7", 7, 0.0001, 70, step_cost_tokens=1.0)]
    [q] = predictions(rows4, _steps("d-n7", 7, [7] * 10), flat)
    assert q["best_n_max"] == 7 and q["best_extrapolated"] is False
    data = {"profile": {"name": "t"}, "results": rows, "steps": steps, "probes": [flat]}
    table = [line for line in _prediction_lines(data, flat) if line.startswith("| d-n1 |")]
    assert table and f"| {p['best_n_max']}* |" in table[-1]


def test_a_drafts_fixed_part_is_fitted_not_spread_over_the_tokens() -> None:
    """A draft model's step costs a + b x n (one pass over what the target
    kept, then n drafted tokens): arms at n_max 4 and 8 give the line, and
    the held-out n_max 2 arm is priced at (a + 2b) / 2 a token, not at the
    others' mean per token, which would make it too cheap."""
    from lab.analysis.holdout import draft_per_token_at

    a, b = 0.004, 0.001

    def arm(name: str, n: int) -> dict[str, Any]:
        return _row(name, n, a + b * n, 10 * n)

    rows = [arm("d-n4", 4), arm("d-n8", 8)]
    assert draft_per_token_at(rows, 2) == pytest.approx((a + 2 * b) / 2)
    # one length alone gives no line: the caller keeps the pooled figure
    assert draft_per_token_at(rows[:1], 2) is None
    # a fit that is no cost (more drafted, less time) is refused
    assert draft_per_token_at([_row("x4", 4, 0.008, 40), _row("x8", 8, 0.004, 80)], 2) is None


def test_a_recurrent_targets_re_runs_are_priced_at_the_arms_own_acceptance() -> None:
    """On a hybrid target a step that rejected a draft re-runs its k kept
    tokens and the pending one: a pass of k + 1 rows, inside the loop's
    seconds. The donor (n_max 4) spends 0.945 baseline tokens a step on them
    (its steps' re-runs priced by the probe: 1.25 for one row alone, T(w)
    above); the held-out n_max 2 arm at set rates 0.5, 0.5 keeps none half the
    time and one a quarter: 0.5 x 1.25 + 0.25 x 1.1 = 0.9. Its held-out loop
    seconds are the donor's with the one taken out and the other put in: the
    same prediction as a donor whose loop spent exactly that and never
    re-ran."""
    from lab.analysis.holdout import replay_tokens
    from lab.analysis.measured_acceptance import PositionAcceptance

    probe = Probe("mlx", "m", "decode", (1, 2, 3, 4, 5), ((0.010, 0.011, 0.012, 0.013, 0.014),),
                  notes={"one_row_pass_s": 0.0125})
    assert probe.alone_ratio(1) == pytest.approx(1.25) and probe.alone_ratio(3) == pytest.approx(1.2)
    assert probe.alone_ratio(6) is None and PROBE.alone_ratio(1) == 1.0
    fixed, token_s = 0.001, 0.01  # the loop's own seconds a step; _row's step_s / step_cost_tokens
    setting = {"kind": "rate", "value": 0.5, "rates": [0.5, 0.25]}
    kept = [4, 2, 0, 1, 3, 4, 2, 1, 1, 2]

    def rows(loop_s: float, reran: int) -> list[dict[str, Any]]:
        report = {"loop_steps": 10, "loop_overhead_s": 10 * loop_s, "rollback_forwards": reran}
        return [_row("base", None, 0, 0), _row("d-n2", 2, 0.002, 8, set_acceptance=setting),
                _row("d-n4", 4, 0.004, sum(kept), engine_report=report)]

    steps = _steps("d-n2", 2, [0, 1, 2, 0, 0, 1, 2, 0, 1, 0]) + _steps("d-n4", 4, kept)
    positions = set_positions(setting)
    assert positions is not None
    assert replay_tokens(rows(fixed + 0.945 * token_s, 8)[2:], steps, probe, positions, 2) == pytest.approx((0.945, 0.9))
    repriced = held_out(rows(fixed + 0.945 * token_s, 8), steps, "d-n2", "p", probe, 2)
    plain = held_out(rows(fixed + 0.9 * token_s, 0), steps, "d-n2", "p", probe, 2)
    assert repriced is not None and plain is not None and plain.replays is None
    assert repriced.replays == pytest.approx((0.945, 0.9))
    assert repriced.predicted == pytest.approx(plain.predicted)
    # left as the donor's, the loop would be dearer and the prediction lower
    kept_as_is = held_out(rows(fixed + 0.945 * token_s, 0), steps, "d-n2", "p", probe, 2)
    assert kept_as_is is not None and kept_as_is.predicted < plain.predicted
    # the chance of keeping exactly k sums to one and ends at keeping all
    chance = PositionAcceptance((10, 6, 3), (6, 3, 3)).kept_exactly(4)
    assert sum(chance) == pytest.approx(1.0) and chance[-1] == pytest.approx(0.3)
    assert chance == pytest.approx((0.4, 0.3, 0.0, 0.0, 0.3))


def test_the_report_says_where_a_held_out_prediction_re_priced_re_runs() -> None:
    from lab.render.report import _prediction_lines

    probe = Probe("mlx", "m", "decode", (1, 2, 3, 4, 5), ((0.010, 0.011, 0.012, 0.013, 0.014),),
                  notes={"one_row_pass_s": 0.0125})
    setting = {"kind": "rate", "value": 0.5, "rates": [0.5, 0.25]}
    report = {"loop_steps": 10, "loop_overhead_s": 0.1045, "rollback_forwards": 8}
    rows = [_row("base", None, 0, 0), _row("d-n2", 2, 0.002, 8, set_acceptance=setting),
            _row("d-n4", 4, 0.004, 20, engine_report=report)]
    steps = _steps("d-n2", 2, [0, 1, 2, 0, 0, 1, 2, 0, 1, 0]) + _steps("d-n4", 4, [4, 2, 0, 1, 3, 4, 2, 1, 1, 2])
    [p] = [p for p in predictions(rows, steps, probe) if p["arm"] == "d-n2"]
    assert p["held_out_replays"] == pytest.approx([0.945, 0.9])
    data = {"profile": {"name": "t"}, "results": rows, "steps": steps, "probes": [probe]}
    [line] = [x for x in _prediction_lines(data, probe) if "re-runs the tokens it kept" in x]
    assert "d-n2 / p 0.94 → 0.90" in line
    # a target whose cache trims never re-ran: no line
    rows[2] = _row("d-n4", 4, 0.004, 20, engine_report={**report, "rollback_forwards": 0})
    data["results"] = rows
    assert not [x for x in _prediction_lines(data, probe) if "re-runs the tokens it kept" in x]
