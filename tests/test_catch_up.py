"""A draft model's catch-up (lab.analysis.predict.catch_up): after a step
that kept all its drafts the draft reads two tokens, not one, and drafts
dearer. The prediction prices it at each n_max by the chance a step keeps
all, so an arm at a high acceptance is not priced with the draft seconds of
arms at lower ones, which saw few such steps (on an H100 a held-out 0.9 arm
was predicted 11-18 % high without it)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from lab.analysis import predict
from lab.analysis.holdout import draft_per_token_at, held_out, set_positions
from lab.analysis.measured_acceptance import PositionAcceptance, per_position
from lab.base.probe import Probe

PROBE = Probe("llamacpp", "m", "decode", (1, 2, 3, 4, 5), ((0.003, 0.0033, 0.0036, 0.0039, 0.0042),))
TOKEN_S = 0.003  # the baseline's seconds per token
PER_TOKEN, CATCH_UP = 0.001, 0.002  # the draft's seconds per drafted token; extra after a step that kept all


def _arm(name: str, rate: float, n_max: int = 4, steps: int = 400, seed: int = 1) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One round of an arm whose every position is kept with ``rate`` given
    the one before, its draft seconds as the module says."""
    rng = random.Random(seed)
    out, full = [], False
    for i in range(steps):
        kept = 0
        while kept < n_max and rng.random() < rate:
            kept += 1
        draft_s = n_max * PER_TOKEN + (CATCH_UP if full else 0.0)
        out.append({"arm": name, "prompt": "p", "round": 1, "index": i, "drafted": n_max, "accepted": kept,
                    "landed": kept + 1, "draft_s": draft_s, "verify_s": 0.004, "step_s": draft_s + 0.004})
        full = kept == n_max
    step_s = sum(s["step_s"] for s in out) / steps
    row = {
        "arm": name, "prompt": "p", "round": 1, "status": "ok", "backend": "llamacpp", "model": "m",
        "drafter": "draft-model", "group": "d", "is_baseline": False, "n_max": n_max, "tok_per_s": 100.0,
        "baseline_arm": "base", "steps": steps, "drafted": steps * n_max, "accepted": sum(s["accepted"] for s in out),
        "step_s": step_s, "step_cost_tokens": step_s / TOKEN_S,
        "draft_s": sum(s["draft_s"] for s in out) / steps, "plain_tokens": 1, "speedup": 1.0,
        "engine_report": {}, "set_acceptance": {"kind": "rate", "value": rate, "rates": [rate ** k for k in range(1, n_max + 1)]},
    }
    return row, out


def test_the_extra_seconds_after_a_step_that_kept_all_are_read_from_the_steps() -> None:
    _, steps = _arm("a", 0.7)
    got = predict.catch_up(steps)
    assert got is not None and got.seconds == pytest.approx(CATCH_UP)
    assert got.after_full == sum(1 for s in steps[:-1] if s["accepted"] == 4) and got.steps == len(steps)
    # too few steps of one kind: nothing read; a negative difference (noise) reads as none
    assert predict.catch_up(steps[:6]) is None
    flipped = [{**s, "draft_s": 0.004 - (s["draft_s"] - 0.004)} for s in steps]
    assert predict.catch_up(flipped).seconds == 0.0  # type: ignore[union-attr]
    # steps that carry no draft seconds (an engine that drafts inside) give nothing
    assert predict.catch_up([{**s, "draft_s": None} for s in steps]) is None


def test_the_chance_of_keeping_all_carries_the_last_rate_on() -> None:
    pos = PositionAcceptance((100, 50), (50, 40))
    assert pos.kept_all(1) == pytest.approx(0.5)
    assert pos.kept_all(2) == pytest.approx(0.4)
    assert pos.kept_all(3) == pytest.approx(0.4 * 0.8)


def test_the_rows_own_prediction_keeps_its_draft_seconds_at_its_n_max() -> None:
    row, steps = _arm("a", 0.8)
    inputs = predict.arm_inputs([row], steps)
    assert inputs is not None and inputs.catch_up_s == pytest.approx(CATCH_UP)
    own = predict.predict(per_position(steps), PROBE, inputs, [4])[0]
    # the row's mean draft seconds a step, within what its last step leaves out
    assert own.draft_cost == pytest.approx(row["draft_s"] / TOKEN_S, rel=0.02)
    assert 0 < own.catch_up_cost < own.draft_cost
    # without its steps the same row prices every drafted token alike: equal at its own n_max,
    # cheaper at n_max 1 (where a step keeps all far more often)
    plain = predict.arm_inputs([row])
    assert plain is not None and plain.catch_up_s == 0.0
    same = predict.predict(per_position(steps), PROBE, plain, [1, 4])
    assert same[1].draft_cost == pytest.approx(own.draft_cost, rel=0.02)
    one = predict.predict(per_position(steps), PROBE, inputs, [1])[0]
    assert one.draft_cost > same[0].draft_cost


def test_an_arm_at_high_acceptance_is_held_out_from_arms_at_lower_ones() -> None:
    base = {"arm": "base", "prompt": "p", "round": 1, "status": "ok", "backend": "llamacpp", "model": "m",
            "is_baseline": True, "n_max": None, "tok_per_s": 1 / TOKEN_S, "engine_report": {}}
    arms = [_arm(f"d-{r}", r, seed=i) for i, r in enumerate((0.5, 0.7, 0.9))]
    rows = [base] + [row for row, _ in arms]
    steps = [s for _, st in arms for s in st]
    target_row, target_steps = arms[2]
    # what the arm's own seconds give at its set rates (the held-out figure's acceptance)
    truth = predict.predict(set_positions(target_row["set_acceptance"]), PROBE,  # type: ignore[arg-type]
                            predict.arm_inputs([target_row], target_steps), [4])[0]  # type: ignore[arg-type]
    got = held_out(rows, steps, "d-0.9", "p", PROBE, 4)
    assert got is not None and got.costs_from == ("d-0.5", "d-0.7")
    assert got.predicted == pytest.approx(truth.speedup, rel=0.02)
    # the same arms with the catch-up unseen (no draft seconds per step): the held-out figure
    # takes the lower arms' mean draft seconds and lands well above
    blind = [{**s, "draft_s": None} for s in steps]
    high = held_out(rows, blind, "d-0.9", "p", PROBE, 4)
    assert high is not None and high.predicted > truth.speedup * 1.04


def test_the_fitted_line_leaves_the_catch_up_out() -> None:
    """Arms at n_max 2 and 8 give the line a + b x n once each arm's
    catch-up seconds are taken out of its draft seconds."""
    r2, s2 = _arm("d-n2", 0.6, n_max=2)
    r8, s8 = _arm("d-n8", 0.6, n_max=8, seed=2)
    rows = [r2, r8]
    catch = {"d-n2": CATCH_UP * sum(1 for s in s2[:-1] if s["accepted"] == 2),
             "d-n8": CATCH_UP * sum(1 for s in s8[:-1] if s["accepted"] == 8)}
    assert draft_per_token_at(rows, 4, catch) == pytest.approx(PER_TOKEN)
    assert draft_per_token_at(rows, 4) != pytest.approx(PER_TOKEN)


def test_the_report_lists_what_the_catch_up_adds_to_each_row() -> None:
    from lab.analysis.run import predictions
    from lab.render.report import _catch_up_notes

    base = {"arm": "base", "prompt": "p", "round": 1, "status": "ok", "backend": "llamacpp", "model": "m",
            "is_baseline": True, "n_max": None, "tok_per_s": 1 / TOKEN_S, "engine_report": {}}
    row, steps = _arm("d-0.9", 0.9)
    preds = predictions([base, row], steps, PROBE)
    own = next(c for c in preds[0]["curve"] if c["n_max"] == 4)
    assert own["catch_up_cost"] == pytest.approx(CATCH_UP / TOKEN_S * per_position(steps).kept_all(4))
    (line,) = _catch_up_notes(preds)
    assert f"d-0.9 / p {own['catch_up_cost']:.2f}" in line
    # steps without draft seconds: nothing priced, no line
    assert _catch_up_notes(predictions([base, row], [{**s, "draft_s": None} for s in steps], PROBE)) == []


def test_a_draft_that_ran_at_two_speeds_from_cell_to_cell_is_flagged() -> None:
    """On one H100 host a 1B draft ran about 1.5 ms a drafted token in some
    cells and 2.2 in others, steady within each: the held-out predictions
    that borrow those seconds moved with it, and the report says so."""
    from lab.analysis.predict import draft_drift

    _, first = _arm("d", 0.7, seed=1)
    _, second = _arm("d", 0.7, seed=2)
    second = [{**s, "round": 2} for s in second]
    # the catch-up alone (steps after a kept-all step drafting dearer) is no drift
    assert draft_drift(first + second, "d") is None
    slow = [{**s, "draft_s": s["draft_s"] * 1.4, "step_s": s["step_s"] + s["draft_s"] * 0.4} for s in second]
    note = draft_drift(first + slow, "d")
    # either kind of step says it: 1.00 to 1.40 ms a token after a partial step, 1.50 to 2.10 after a full one
    assert note is not None and "+40%" in note and ("1.00 to 1.40 ms" in note or "1.50 to 2.10 ms" in note)
    # a draft that is a sliver of its step (an oracle's lookup) moves nothing: no note
    sliver = [{**s, "step_s": s["draft_s"] * 20} for s in first + slow]
    assert draft_drift(sliver, "d") is None
    # another arm's steps say nothing of this one
    assert draft_drift(first + slow, "other") is None


def _file_entry(costs: dict[str, Any]) -> Any:
    from lab.analysis import acceptance_file as ap

    entry = {"scope": "prompt", "arm": "draft", "prompt": "code", "backend": "llamacpp", "target": "m",
             "drafter": "draft-model", "drafter_model": "d", "n_max": 4, "reached": [100, 90, 80, 70],
             "accepted": [90, 80, 70, 60], "costs": costs}
    return ap.from_json({"kind": ap.KIND, "version": 1, "entries": [entry]}).entries[0]


FILE_COSTS = {"baseline_token_s": 0.02, "draft_s_per_token": 0.01, "loop_s_per_step": 0.0, "plain_share": 0.0,
              "catch_up_s": 0.006, "catch_up_per_token": 0.002}


def test_lab_predict_prices_the_catch_up_on_the_draft_probes_machine() -> None:
    """The catch-up travels as the draft's cost does: from the draft probe
    where one is given (its two-row pass beyond a one-row one, and on a GPU
    the two passes that change shape), else from the acceptance file's run
    in baseline tokens there; the output says which."""
    from lab.analysis import acceptance_file as ap

    entry = _file_entry(FILE_COSTS)
    assert entry.costs.catch_up_s == 0.006 and entry.costs.catch_up_per_token == 0.002
    target = Probe("llamacpp", "m", "decode", (1, 2, 3, 4, 5), ((0.001, 0.0011, 0.0012, 0.0013, 0.0014),))
    switch = {"one_s": 0.0005, "widths": {"2": [0.0006, 0.0016, 0.0015]}}
    draft = Probe("llamacpp", "d", "decode", (1, 2), ((0.0005, 0.0006),), notes={"switch_s": switch})
    inputs, _, _ = ap.inputs_for(entry, target, draft)
    # two rows back to back 0.2 of a row more, into them 2.0 more, one row after them 2.0 more
    assert inputs.catch_up_s == pytest.approx((0.2 + 2.0 + 2.0) * 0.0005) and inputs.catch_up_per_token == 0.0
    assert "change shape" in ap.catch_up_words(entry, target, draft)
    own = next(p for p in ap.predict_on(entry, target, draft).predictions if p.n_max == 4)
    assert own.catch_up_cost == pytest.approx(inputs.catch_up_s / 0.001 * entry.positions.kept_all(4))
    # no draft probe: the file's run, in its baseline tokens, carried to this probe's token
    carried, _, _ = ap.inputs_for(entry, target)
    assert carried.catch_up_s == pytest.approx(0.006 / 0.02 * 0.001)
    assert carried.catch_up_per_token == pytest.approx(0.002 / 0.02 * 0.001)
    assert "acceptance file's run" in ap.catch_up_words(entry, target)
    # a file from before it kept the catch-up reads none, and a damaged one is refused by name
    old = _file_entry({k: v for k, v in FILE_COSTS.items() if "catch" not in k})
    assert old.costs.catch_up_s == 0.0 and "none seen" in ap.catch_up_words(old, target)
    with pytest.raises(ap.AcceptanceFileError, match="catch_up"):
        _file_entry({**FILE_COSTS, "catch_up_per_token": 0.5})


def test_an_acceptance_file_keeps_its_runs_catch_up() -> None:
    from lab.analysis import acceptance_file as ap

    row, steps = _arm("d", 0.7)
    costs = ap._costs([row], steps)
    assert costs is not None and costs["catch_up_s"] == pytest.approx(CATCH_UP)
    after_full = sum(1 for s in steps[:-1] if s["accepted"] == 4)
    assert costs["catch_up_per_token"] == pytest.approx(CATCH_UP * after_full / row["drafted"])
