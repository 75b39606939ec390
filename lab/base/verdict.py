"""The verdict of a result row or of a cell's paired rounds: pays,
break-even, loses, structural loss (cost C at or above the most a step can
land, n_max + 1), failed, baseline, or uncertain.

What cannot depend on load is said as such: a drafter none of whose drafts
was accepted loses at any load (a step lands what a plain decode does, and
drafts and verifies a wider batch on top), and a step that costs at least
what it can land, in every paired round, is a structural loss at any load.
A verdict never contradicts the measured speedup (the median of the paired
ones): above 1 it is never a loss, and where the step cost disagrees the
line says so and which is the evidence. Uncertain is kept for paired rounds
that disagree (one pays, another loses, or they straddle 1.0), with what
would settle them, and for cells on a busy machine that ran minutes from
their baseline's (``[run] order = "arms"``). The arithmetic is
:mod:`lab.base.economics`."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Mapping, Sequence, TypeGuard

from lab.base.economics import (
    EVEN,
    LOSES,
    NEUTRAL_BAND,
    PAYS,
    STRUCTURAL,
    UNCERTAIN,
    Call,
    annotate,
    economics,
    measured_call,
)

__all__ = ["ACCEPTANCE", "ANY_LOAD", "BUSY_WARNING", "COST", "COUNTS_WARNING", "SPEEDUP", "THREADS_WARNING",
           "NEUTRAL_BAND", "Verdict", "busy_warning", "counts_warning", "disagreement", "failed_checks", "judge",
           "verdict", "verdict_kind", "zero_acceptance"]

BUSY_WARNING = "⚠ busy machine"
COUNTS_WARNING = "⚠ counts differ from the server's"
THREADS_WARNING = "⚠ more threads than free cores"
# what a verdict that holds whatever the machine's load says of itself
ANY_LOAD = "at any load"

# what a verdict rests on
ACCEPTANCE = "acceptance"  # none of the drafts accepted: counted, not timed
COST = "cost"  # the step cost against the most a step lands, in paired cells
SPEEDUP = "speedup"  # the measured (median paired) speedup


@dataclass(frozen=True)
class Verdict:
    """A verdict as data: its kind, its line, what it rests on
    (:data:`ACCEPTANCE`, :data:`COST`, :data:`SPEEDUP`; None for a verdict
    that measured nothing), whether it holds at any load, and for an
    uncertain one what would settle it."""

    kind: str
    line: str
    evidence: str | None = None
    any_load: bool = False
    settle: str | None = None


def verdict(row: Mapping[str, Any]) -> str:
    return judge(row).line


def verdict_kind(row: Mapping[str, Any]) -> str:
    """The verdict's kind alone (pays, break-even, loses, structural loss,
    uncertain, failed, baseline, no steps, no baseline), for colouring and diffs."""
    return judge(row).kind


def _number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def zero_acceptance(row: Mapping[str, Any]) -> bool:
    """Whether a row (or a summary that says ``zero_acceptance``) landed
    nothing but the target's own token each step."""
    if "zero_acceptance" in row:
        return bool(row["zero_acceptance"])
    accepted, drafted, length = row.get("accepted"), row.get("drafted"), row.get("mean_accepted_len")
    if _number(accepted) and _number(drafted) and float(drafted) > 0:
        return float(accepted) == 0
    return _number(length) and float(length) <= 1.0 + 1e-9


def disagreement(speedups: Sequence[float], band: float = NEUTRAL_BAND) -> str | None:
    """How paired speedups disagree about the verdict, or None: one pays
    and another loses, or they straddle 1.0 with one past the band."""
    if len(speedups) < 2:
        return None
    lo, hi = min(speedups), max(speedups)
    if not (lo < 1.0 <= hi) or (lo > 1 - band and hi < 1 + band):
        return None
    if lo <= 1 - band and hi >= 1 + band:
        return "pays in one, loses in another"
    return "they straddle 1.0"


def _settle(n: int, rounds_needed: int | None, busy: bool) -> str:
    """What would settle paired rounds that disagree."""
    if rounds_needed is not None and rounds_needed > n:
        return (f"{rounds_needed - n} more paired rounds would settle it if they spread as these did "
                f"(rounds = {rounds_needed})" + (", or a quieter machine" if busy else ""))
    return ("at this spread rounds alone would take too many to settle it: a quieter machine, whose rounds "
            "spread less, is what settles it")


def judge(
    row: Mapping[str, Any], speedups: Sequence[float] | None = None, costs: Sequence[float | None] | None = None,
    *, paired: bool = True, rounds_needed: int | None = None, band: float = NEUTRAL_BAND,
) -> Verdict:
    """The verdict of a row, or of a cell's summary with its paired
    ``speedups`` and the step ``costs`` of those rounds (round order; each
    row's own when not given). ``paired``: each cell ran beside its
    baseline's (``[run] order = "paired"``), so a load that came and went
    moved both. ``rounds_needed``: paired rounds in all that would settle
    disagreeing pairs at their spread (:func:`lab.analysis.stats.rounds_to_settle`)."""
    first = measured_call(row, band)
    if first.kind not in (PAYS, EVEN, LOSES, STRUCTURAL):
        return Verdict(first.kind, annotate(row, first).line)
    speedup = float(row["speedup"])
    xs = [float(x) for x in speedups] if speedups else [speedup]
    mid = statistics.median(xs) if speedups else speedup
    econ = economics(row)
    assert econ is not None  # measured_call found both
    y = econ.max_yield
    busy = bool(row.get("contended_rounds") or row.get("contended"))
    shown = ", ".join(f"{x:.2f}x" for x in xs)

    def done(kind: str, line: str, evidence: str | None, any_load: bool = False, settle: str | None = None) -> Verdict:
        return Verdict(kind, annotate(row, Call(kind, line)).line, evidence, any_load, settle)

    if zero_acceptance(row):
        length = econ.mean_accepted_len if econ.mean_accepted_len is not None else 1.0
        if mid <= 1.0:
            return done(LOSES, f"loses {ANY_LOAD}: none of its drafts was accepted (mean accepted length "
                               f"{length:.2f}), so a step lands the one token a plain decode would, with a draft and "
                               f"a wider verify on top; measured {mid:.2f}x", ACCEPTANCE, any_load=True)
        if mid < 1 + band:
            return done(EVEN, f"break-even: {mid:.2f}x measured, but none of its drafts was accepted: a step lands "
                              "what a plain decode does, so it cannot pay at any load", ACCEPTANCE)
        return done(UNCERTAIN, f"uncertain: measured {mid:.2f}x, yet none of its drafts was accepted, so a step "
                               "lands only what a plain decode does: the timing is off", SPEEDUP,
                    settle="a quieter machine")
    given: Sequence[Any] = costs if costs is not None else [row.get("step_cost_tokens")]
    cost_list = [float(c) for c in given if _number(c)]
    structural_everywhere = (y is not None and econ.structural and bool(cost_list)
                             and all(c >= y for c in cost_list))
    # cells minutes from their baseline's on a busy machine: their cost is no paired measurement
    if structural_everywhere and mid <= 1.0 and (paired or not row.get("contended")):
        assert y is not None
        spread = (f" ({', '.join(f'{c:.2f}' for c in cost_list)} in {len(cost_list)} paired rounds)"
                  if len(cost_list) > 1 else "")
        return done(STRUCTURAL, f"structural loss {ANY_LOAD}: a step costs {econ.cost_tokens:.2f} baseline tokens"
                                f"{spread} but lands at most {y}, so no acceptance rate and no quieter machine can "
                                f"make it pay; measured {mid:.2f}x", COST, any_load=True)
    said = disagreement(xs, band)
    if said:
        settle = _settle(len(xs), rounds_needed, busy)
        return done(UNCERTAIN, f"uncertain: its paired rounds disagree ({shown}: {said}); {settle}", SPEEDUP,
                    settle=settle)
    if row.get("contended") and not paired:  # every round busy, each minutes from its baseline's
        call = measured_call(row, band, structural=mid <= 1.0)
        settle = "a quieter machine, or [run] order = \"paired\""
        return done(UNCERTAIN, f"uncertain, the machine was busy and each cell ran minutes from its baseline's: "
                               f"measured {call.line}; settle it with {settle}", SPEEDUP, settle=settle)
    call = measured_call(row, band, structural=mid <= 1.0)
    line = call.line
    if econ.structural and mid > 1.0:
        line += (f"; the step cost as timed, {econ.cost_tokens:.2f} baseline tokens against at most {y} landed, "
                 "says it cannot pay: the measured speedup is the evidence, and the steps' timing overstates them")
    return done(call.kind, line, COST if call.kind == STRUCTURAL else SPEEDUP)


def busy_warning(row: Mapping[str, Any]) -> str:
    """The mark beside a verdict taken on a busy machine ("" if none), with
    the thread count that fits (``threads_hint``) where threads were too many."""
    busy = row.get("contended_rounds")
    rounds = row.get("rounds")
    hint = row.get("threads_hint")
    try_it = f" (try threads = {hint})" if isinstance(hint, int) and not isinstance(hint, bool) else ""
    if busy is None:
        busy = 1 if row.get("contended") else 0
        rounds = None
    if not busy:
        return f"{THREADS_WARNING}{try_it}" if try_it else ""
    if rounds and busy < rounds:
        return f"{BUSY_WARNING} ({busy} of {rounds} rounds){try_it}"
    return BUSY_WARNING + try_it


def failed_checks(row: Mapping[str, Any]) -> list[str]:
    """The engine's count cross-checks (``engine_report.checks``: the lab's
    steps against the server's own counters) that this row failed."""
    checks = (row.get("engine_report") or {}).get("checks") or {}
    return [name for name, ok in checks.items() if ok is False]


def counts_warning(row: Mapping[str, Any]) -> str:
    """The mark a report sets beside a verdict whose counts the server
    contradicts ("" if none): the failed checks of a row, or how many rounds
    of a summary (``counts_failed_rounds``) failed one."""
    failed = row.get("counts_failed_rounds")
    if failed is None:
        names = failed_checks(row)
        return f"{COUNTS_WARNING} ({', '.join(names)})" if names else ""
    if not failed:
        return ""
    rounds = row.get("rounds")
    return f"{COUNTS_WARNING} ({failed} of {rounds} rounds)" if rounds else COUNTS_WARNING
