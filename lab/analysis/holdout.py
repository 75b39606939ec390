"""Predictions that take nothing from the arm they predict: acceptance from
the set rates or the kin arm drafting most per step, draft and loop seconds
from the kin arms (a line fitted over drafted tokens, catch-up priced at this
arm's acceptance), T(w) from the probe. Each input says where it came from."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from lab.analysis import predict
from lab.analysis.measured_acceptance import PositionAcceptance, per_position
from lab.base.set_acceptance import conditional

# pseudo-counts that make set rates read as measured ones (only ratios matter)
_SET_COUNT = 1_000_000


@dataclass(frozen=True)
class HeldOut:
    predicted: float
    acceptance_from: str  # "set rates" or the arm whose steps gave it
    costs_from: tuple[str, ...]  # the arms whose draft and loop seconds were used
    # a recurrent target's re-runs after a rejection, baseline tokens a step
    # (None where it rolled back without re-running)
    replays: tuple[float, float] | None = None


def kin(rows: Sequence[Mapping[str, Any]], arm: str) -> str | None:
    """What makes arms kin: backend, model, drafter and the options that say
    what drafts, so a sweep's arms are kin and another draft model is not."""
    first = next((r for r in rows if r["arm"] == arm), None)
    if first is None:
        return None
    config = first.get("draft_config")
    # an engine's own drafting is told apart by its options (spec type, draft model)
    # where the row has them, else by the profile entry it came from
    drafter = first.get("drafter") or ("engine" if config else f"{first.get('backend')}:{first.get('group') or arm}")
    return f"{first.get('backend')}|{first.get('model')}|{drafter}|{config or ''}"


def set_positions(setting: Mapping[str, Any] | None) -> PositionAcceptance | None:
    """Set rates as per-position counts."""
    rates = setting.get("rates") if isinstance(setting, Mapping) else None
    if not rates:
        return None
    reached: list[int] = []
    accepted: list[int] = []
    survive = 1.0
    for c in conditional([float(r) for r in rates]):
        n = max(1, round(_SET_COUNT * survive))
        reached.append(n)
        accepted.append(round(n * c))
        survive *= c
        if survive <= 0:
            break
    return PositionAcceptance(tuple(reached), tuple(accepted))


def held_out(
    results: Sequence[Mapping[str, Any]], steps: Sequence[Mapping[str, Any]], arm: str, prompt: str,
    probe: Any, n_max: int | None,
) -> HeldOut | None:
    """The held-out prediction of one arm x prompt, or None when the run has
    no other arm to take its inputs from."""
    if probe is None or not n_max:
        return None
    key = kin(results, arm)
    own = [r for r in results if r["arm"] == arm and r["prompt"] == prompt and int(r.get("round", 1)) >= 1]
    if key is None or not own:
        return None
    others = sorted({r["arm"] for r in results if r["arm"] != arm and not r.get("is_baseline") and kin(results, r["arm"]) == key})
    donor_rows = [r for r in results if r["arm"] in others and r["prompt"] == prompt and int(r.get("round", 1)) >= 1]
    inputs = predict.arm_inputs(donor_rows, steps) if donor_rows else None
    if inputs is None:
        return None
    positions = set_positions(own[0].get("set_acceptance"))
    source = "set rates"
    if positions is None:
        # another arm's acceptance, never set rates: those say nothing of this drafter; nor an
        # arm whose draft policy drafts long only after kept drafts (deep positions flattered)
        candidates = [a for a in others if not any(r.get("set_acceptance") or r.get("draft_policy") not in (None, "fixed")
                                                   for r in results if r["arm"] == a)]
        if not candidates:
            return None
        donor = max(candidates, key=lambda a: max((int(r.get("n_max") or 0) for r in results if r["arm"] == a), default=0))
        donor_steps = [s for s in steps if s.get("arm") == donor and s.get("prompt") == prompt and int(s.get("round", 1)) >= 1]
        if not donor_steps:
            return None
        positions, source = per_position(donor_steps), donor
    per_token = draft_per_token_at(donor_rows, n_max, _catch_up_by_arm(steps, donor_rows, inputs.catch_up_s))
    if per_token is not None:
        # the line is fitted without the catch-up, which predict adds back at this arm's acceptance
        inputs = dataclasses.replace(inputs, draft_s_per_token=per_token, catch_up_per_token=0.0)
    replays = replay_tokens(donor_rows, steps, probe, positions, n_max)
    if replays is not None:
        shift = (replays[1] - replays[0]) * inputs.baseline_token_s
        inputs = dataclasses.replace(inputs, loop_s_per_step=max(0.0, inputs.loop_s_per_step + shift))
    preds = predict.predict(positions, probe, inputs, [n_max])
    if not preds:
        return None
    return HeldOut(preds[0].speedup, source, tuple(others), replays)


def replay_tokens(rows: Sequence[Mapping[str, Any]], steps: Sequence[Mapping[str, Any]], probe: Any,
                  positions: PositionAcceptance, n_max: int) -> tuple[float, float] | None:
    """Baseline tokens a step spends re-running kept tokens after a rejection
    (k kept: k + 1 rows): the mean over ``rows``' steps and the expected one
    at ``positions``; None where nothing re-ran or the probe is too narrow."""
    reran = sum(predict.saved_count((r.get("engine_report") or {}).get("rollback_forwards")) or 0
                for r in rows if isinstance(r.get("engine_report"), Mapping))
    if not reran:
        return None
    rounds = {(r.get("arm"), r.get("prompt"), r.get("round")) for r in rows
              if r.get("status") == "ok" and r.get("steps")}
    own = [s for s in steps if (s.get("arm"), s.get("prompt"), s.get("round")) in rounds]
    if not own:
        return None
    # the rows each step that refused a draft re-ran: its kept drafts and the pending token
    reruns = [int(s["accepted"]) + 1 for s in own if int(s.get("accepted", 0)) < int(s.get("drafted", 0))]
    costs = {w: probe.alone_ratio(w) for w in {*reruns, *range(1, n_max + 1)}}
    if any(c is None for c in costs.values()):
        return None
    measured = sum(costs[w] for w in reruns)
    chance = positions.kept_exactly(n_max)
    expected = sum(chance[k] * costs[k + 1] for k in range(n_max))
    return measured / len(own), expected


def _catch_up_by_arm(steps: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]], seconds: float) -> dict[str, float]:
    """Per arm, the seconds its rows' steps spent catching up after steps
    that kept all (``seconds`` each)."""
    if seconds <= 0:
        return {}
    rounds = {(r["arm"], r["prompt"], r.get("round")) for r in rows}
    out: dict[str, float] = {}
    for key, full, _step in predict.after_steps(steps):
        if full and key in rounds:
            out[key[0]] = out.get(key[0], 0.0) + seconds
    return out


def draft_per_token_at(rows: Sequence[Mapping[str, Any]], n_max: int,
                       catch_up_s: Mapping[str, float] | None = None) -> float | None:
    """Seconds per drafted token at ``n_max`` from a line a + b x n fitted over
    arms drafting different lengths, their ``catch_up_s`` taken out; None with
    fewer than two lengths or a negative part."""
    by_arm: dict[str, list[float]] = {}
    for r in rows:
        if r.get("status") != "ok" or not r.get("steps") or r.get("draft_s") is None or not r.get("drafted"):
            continue
        acc = by_arm.setdefault(r["arm"], [0.0, 0.0, 0.0])
        acc[0] += int(r["steps"])
        acc[1] += int(r["drafted"])
        acc[2] += float(r["draft_s"]) * int(r["steps"])
    less = catch_up_s or {}
    points = [(drafted / steps, (secs - less.get(arm, 0.0)) / steps) for arm, (steps, drafted, secs) in by_arm.items() if steps]
    if len({round(x, 3) for x, _ in points}) < 2:
        return None
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    sxx = sum((x - mx) ** 2 for x, _ in points)
    b = sum((x - mx) * (y - my) for x, y in points) / sxx
    a = my - b * mx
    if a < 0 or b <= 0:
        return None
    return (a + b * n_max) / n_max
