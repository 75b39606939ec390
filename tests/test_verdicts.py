"""Verdicts that hold whatever the load, intervals that say what they know,
and one figure per cell: a drafter that accepts nothing and a step that costs
more than it can land lose firmly on a busy machine; only paired rounds that
disagree read uncertain, with what would settle them; a measured gain is
never called a loss; two rounds show their two values, more get a
t-interval; every section gives a cell the same figure."""

from __future__ import annotations

import math
import re
import statistics
from typing import Any

import pytest

from lab.analysis import stats
from lab.analysis.run import ran_paired, summarize
from lab.base import economics as breakeven
from lab.base.row import RESULT_KEYS
from lab.base.verdict import ACCEPTANCE, ANY_LOAD, COST, SPEEDUP, judge
from lab.render.report import render_markdown


def _row(arm: str, rnd: int, tok_per_s: float, **kw: Any) -> dict[str, Any]:
    row: dict[str, Any] = {k: None for k in RESULT_KEYS}
    row.update(arm=arm, backend="llamacpp", drafter=None, prompt="p", round=rnd, status="ok", tok_per_s=tok_per_s,
               verdict="", is_baseline=arm == "base", detail="", n_tokens=100)
    row.update(kw)
    return row


def _cell(base: list[float], spec: list[float], *, cost: float | list[float] = 2.0, length: float = 3.0,
          accepted: int = 60, drafted: int = 90, n_max: int = 3, busy: bool = False) -> list[dict[str, Any]]:
    """A baseline and one speculative arm over paired rounds: tok/s per
    round, the step cost (one for all rounds, or one per round) and the
    mean accepted length; ``busy``: every cell beside other work."""
    costs = cost if isinstance(cost, list) else [cost] * len(spec)
    rows = [_row("base", i + 1, t, contended=busy) for i, t in enumerate(base)]
    for i, (t, c) in enumerate(zip(spec, costs)):
        rows.append(_row("spec", i + 1, t, drafter="ngram", baseline_arm="base", speedup=t / base[i], steps=30,
                         drafted=drafted, accepted=accepted, acceptance_rate=accepted / drafted,
                         mean_accepted_len=length, step_s=c / base[i], step_cost_tokens=c, max_yield=n_max + 1,
                         n_max=n_max, contended=busy))
    return rows


def _spec(rows: list[dict[str, Any]], paired: bool = True) -> dict[str, Any]:
    return next(s for s in summarize(rows, paired) if s["arm"] == "spec")


# -- what cannot depend on load -------------------------------------------------------------


def test_a_drafter_that_accepts_nothing_loses_at_any_load_even_on_a_busy_machine() -> None:
    rows = _cell([100.0, 60.0], [80.0, 50.0], accepted=0, length=1.0, busy=True)
    for paired in (True, False):  # counted, not timed: the order of the cells does not matter
        s = _spec(rows, paired)
        assert s["verdict_kind"] == breakeven.LOSES and s["verdict_any_load"], s["verdict"]
        assert s["verdict_evidence"] == ACCEPTANCE
        assert s["verdict"].startswith(f"loses {ANY_LOAD}: none of its drafts was accepted")
        assert "uncertain" not in s["verdict"]
    # a server arm that reports only the mean accepted length: 1.00 is the same fact
    one = judge({**rows[-1], "accepted": None, "drafted": None, "mean_accepted_len": 1.0})
    assert one.kind == breakeven.LOSES and one.any_load


def test_a_step_costing_more_than_it_can_land_is_a_structural_loss_at_any_load_on_a_busy_paired_run() -> None:
    # the write-ups' dead end: 4.6 baseline tokens a step against a yield of 4, on a busy machine
    rows = _cell([100.0, 55.0], [50.0, 30.0], cost=[4.6, 4.7], length=3.5, busy=True)
    s = _spec(rows, paired=True)
    assert s["verdict_kind"] == breakeven.STRUCTURAL and s["verdict_any_load"] and s["verdict_evidence"] == COST
    assert f"structural loss {ANY_LOAD}: a step costs 4.65 baseline tokens (4.60, 4.70 in 2 paired rounds)" \
           in s["verdict"]
    assert "no acceptance rate and no quieter machine can make it pay" in s["verdict"]
    # arm by arm on a busy machine the cost's two sides ran minutes apart: not evidence then
    apart = _spec(rows, paired=False)
    assert apart["verdict_kind"] == breakeven.UNCERTAIN and not apart["verdict_any_load"]
    assert "order = \"paired\"" in apart["verdict"]


def test_pairs_that_disagree_on_the_speedup_do_not_unsettle_a_cost_at_the_ceiling() -> None:
    # a burst of load flattered one pair's baseline; the step cost stays past the yield in both
    s = _spec(_cell([100.0, 100.0], [104.0, 70.0], cost=[4.3, 4.8], length=3.5, busy=True))
    assert s["speedup"] < 1 and s["verdict_kind"] == breakeven.STRUCTURAL and s["verdict_any_load"], s["verdict"]


def test_a_cost_at_the_ceiling_in_only_some_rounds_is_not_said_to_hold_at_any_load() -> None:
    s = _spec(_cell([100.0, 100.0, 100.0], [70.0, 72.0, 71.0], cost=[4.2, 3.9, 4.1], length=3.0))
    assert not s["verdict_any_load"]


# -- uncertain only where paired rounds disagree ------------------------------------------------


def test_paired_rounds_that_agree_on_a_busy_machine_keep_their_verdict() -> None:
    s = _spec(_cell([100.0, 50.0], [140.0, 72.0], busy=True), paired=True)
    assert s["verdict_kind"] == breakeven.PAYS and s["verdict_evidence"] == SPEEDUP, s["verdict"]


def test_paired_rounds_that_disagree_are_uncertain_and_say_how_many_rounds_would_settle_them() -> None:
    # two rounds pay, one loses: a few more pairs at this spread put the interval past the band
    ratios = [1.30, 1.25, 0.97]
    s = _spec(_cell([100.0] * 3, [100.0 * x for x in ratios]))
    assert s["verdict_kind"] == breakeven.UNCERTAIN and s["verdict_evidence"] == SPEEDUP
    need = stats.rounds_to_settle(ratios)
    assert need is not None and 3 < need <= stats.MAX_SETTLE_ROUNDS
    # by hand: the smallest n with t(n-1) * sd / sqrt(n) below |mean log| - log(1.02)
    logs = [math.log(x) for x in ratios]
    room = abs(statistics.fmean(logs)) - math.log(1.02)
    assert stats.t975(need - 1) * statistics.stdev(logs) / math.sqrt(need) < room
    assert stats.t975(need - 2) * statistics.stdev(logs) / math.sqrt(need - 1) >= room
    assert f"{need - 3} more paired rounds would settle it if they spread as these did (rounds = {need})" \
           in s["verdict"]
    assert s["verdict_settle"] and "1.30x, 1.25x, 0.97x: pays in one, loses in another" in s["verdict"]
    # two rounds that disagree: their call says so
    assert _spec(_cell([100.0, 100.0], [130.0, 97.0]))["call"] == stats.DISAGREE


def test_pairs_around_break_even_send_the_reader_to_a_quieter_machine() -> None:
    s = _spec(_cell([100.0, 100.0], [108.0, 93.0], busy=True))
    assert s["verdict_kind"] == breakeven.UNCERTAIN
    assert stats.rounds_to_settle([1.08, 0.93]) is None
    assert "a quieter machine" in s["verdict_settle"]


def test_pairs_inside_the_neutral_band_are_break_even_not_uncertain() -> None:
    s = _spec(_cell([100.0, 100.0], [99.5, 100.8], length=2.0))
    assert s["verdict_kind"] == breakeven.EVEN


@pytest.mark.parametrize("speedup", [1.001, 1.019, 1.02, 1.07, 1.5, 3.0])
@pytest.mark.parametrize("cost", [1.5, 3.9, 4.0, 6.0])
@pytest.mark.parametrize("length", [1.0, 1.4, 3.8])
def test_a_measured_speedup_above_one_is_never_read_as_a_loss(speedup: float, cost: float, length: float) -> None:
    accepted = 0 if length == 1.0 else 40
    for busy in (False, True):
        for paired in (True, False):
            rows = _cell([100.0, 100.0], [100.0 * speedup] * 2, cost=cost, length=length, accepted=accepted, busy=busy)
            s = _spec(rows, paired)
            assert s["speedup"] > 1
            assert s["verdict_kind"] not in (breakeven.LOSES, breakeven.STRUCTURAL), (s["verdict"], busy, paired)
            assert not re.match(r"(loses|structural loss)", s["verdict"])


def test_the_row_verdict_results_json_keeps_follows_the_same_rules() -> None:
    rows = _cell([100.0], [107.0], cost=5.0, length=3.5, busy=True)
    v = judge(rows[-1])
    assert v.kind == breakeven.PAYS and "step cost as timed" in v.line  # 1.07x, cost 5 against 4: never a loss


# -- intervals ---------------------------------------------------------------------------------


def test_two_rounds_show_their_two_values_and_no_interval() -> None:
    rows = _cell([100.0, 100.0], [114.0, 116.0])
    s = _spec(rows)
    assert s["speedups"] == pytest.approx([1.14, 1.16]) and s["speedup_ci"] is None
    assert s["speedup"] == pytest.approx(1.15)
    md = render_markdown({"profile": {"name": "t", "run": {"rounds": 2}}, "results": rows})
    detail = next(line for line in md.splitlines() if line.startswith("| spec | p | "))
    assert "| 1.15x (1.14 / 1.16) |" in detail and "[" not in detail.split("|")[4]
    stat = next(line for line in md.splitlines() if line.startswith("- spec / p:"))
    assert "median of 2 paired rounds (1.14, 1.16), too few for an interval" in stat
    assert "95%" not in stat


def test_from_three_rounds_a_t_interval_on_the_paired_log_ratios() -> None:
    ratios = [1.10, 1.25, 1.18, 1.31]
    rows = _cell([100.0] * 4, [100.0 * x for x in ratios])
    s = _spec(rows)
    logs = [math.log(x) for x in ratios]
    half = 3.182 * statistics.stdev(logs) / math.sqrt(4)  # t(3), two-sided 95 %
    mean = statistics.fmean(logs)
    assert s["speedup_ci"] == pytest.approx([math.exp(mean - half), math.exp(mean + half)])
    assert s["speedup"] == pytest.approx(statistics.median(ratios))
    md = render_markdown({"profile": {"name": "t", "run": {"rounds": 4}}, "results": rows})
    stat = next(line for line in md.splitlines() if line.startswith("- spec / p:"))
    assert f"95% t-interval {s['speedup_ci'][0]:.2f}–{s['speedup_ci'][1]:.2f}" in stat
    assert "t-interval of the paired log-ratios' mean" in md


def test_t_quantiles() -> None:
    assert stats.t975(1) == pytest.approx(12.706) and stats.t975(4) == pytest.approx(2.776)
    assert stats.t975(60) == pytest.approx(2.000, abs=0.002) and stats.t975(1000) == pytest.approx(1.962, abs=0.001)
    assert stats.t_interval([1.2, 1.3]) is None


def test_every_section_gives_a_cell_the_same_figure() -> None:
    # far-apart rounds, where a geometric mean and a median differ
    rows = _cell([100.0, 100.0, 100.0], [150.0, 200.0, 210.0])
    md = render_markdown({"profile": {"name": "t", "run": {"rounds": 3}}, "results": rows})
    s = _spec(rows)
    assert s["speedup"] == pytest.approx(2.0)  # the median, not the geometric mean (1.84)
    table = next(line for line in md.splitlines() if line.startswith("| spec | 150.00"))
    detail = next(line for line in md.splitlines() if line.startswith("| spec | p | "))
    stat = next(line for line in md.splitlines() if line.startswith("- spec / p:"))
    assert "(+100%)" in table and "| 2.00x [" in detail and stat.startswith("- spec / p: 2.00x, median of 3")


def test_a_saved_run_without_an_order_ran_arm_by_arm() -> None:
    assert ran_paired({"profile": {"run": {}}, "results": []}) is False
    assert ran_paired({"profile": {"run": {"order": "paired"}}}) is True
    assert ran_paired({"profile": {"run": {"order": "paired"}}, "order": {"order": "arms"}}) is False
