"""Draft-policy replay: how other draft-length policies (fixed n up to the
recorded n_max, the adaptive ones of :mod:`lab.base.draft_policy`, and a
per-category best n) would have done on the steps an arm recorded, priced
as :mod:`lab.analysis.predict` prices steps.

A policy re-chunks a cell's per-position marks into its own steps
(:func:`replay_stream`) and never asks for more than was recorded
(:class:`ReplayRefused`); docs/design-notes.md gives the assumption."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from lab.analysis import predict, stats
from lab.base import draft_policy
from lab.base.probe import Probe

ADAPTIVE = (draft_policy.GROW_SHRINK, draft_policy.GROW_HALVE)
PER_CATEGORY = "per-category"
ALL_PROMPTS = "all"
CONFIDENCE_NOTE = ("a stop-drafting threshold on the draft's own confidence: no drafter records a "
                   "confidence in the steps it saves")
# policies within this of each other tie, and the simpler (a fixed n) is named
TIE = 0.01

# Marks of one text position in a cell's recorded stream.
KEPT = 0
REFUSED = 1
UNDRAFTED = 2


class ReplayRefused(ValueError):
    """A policy asked for more tokens a step than the recording drafted."""


@dataclass(frozen=True)
class Tally:
    """What a replayed policy did over some text: its steps, the tokens they
    drafted and landed and their cost in baseline tokens, and the tokens
    landed by plain decodes (one baseline token each)."""

    steps: int = 0
    drafted: int = 0
    landed: int = 0
    cost: float = 0.0
    plain: int = 0

    def __add__(self, other: Tally) -> Tally:
        return Tally(self.steps + other.steps, self.drafted + other.drafted, self.landed + other.landed,
                     self.cost + other.cost, self.plain + other.plain)

    @property
    def tokens(self) -> int:
        return self.landed + self.plain

    @property
    def speedup(self) -> float | None:
        spent = self.cost + self.plain
        return (self.landed + self.plain) / spent if spent > 0 else None


def kept_none_prices(probe: Probe, n_max: int) -> tuple[float, ...] | None:
    """C(n) of a step that kept none of its n drafts, where a step-priced
    probe timed one; a step keeping k of n costs the line to C(n) at k / n."""
    prices = [1.0]
    for n in range(1, n_max + 1):
        t = probe.kept_none_ratio(n + 1)
        if t is None:
            break
        prices.append(t)
    return tuple(prices) if len(prices) > 1 else None


def _priced(prices: Sequence[float], none: Sequence[float] | None, d: int, kept: int) -> float:
    """A step of d drafts that kept ``kept``: C(d), or on the line from the
    step that kept none where the probe priced one."""
    if none is None or d >= len(none):
        return prices[d]
    return none[d] + (prices[d] - none[d]) * min(kept, d) / d


def step_prices(probe: Probe, inputs: predict.ArmInputs, n_max: int) -> tuple[float, ...]:
    """C(n) for n = 0..n_max where the probe covers T(n + 1) (index 0: a
    plain decode); the draft's catch-up is :func:`catch_up_price`'s. An
    untrusted probe prices nothing (:class:`lab.base.probe.UntrustedProbe`)."""
    probe.require_trusted()
    whole = probe.prices_steps
    per_token = 0.0 if whole else (inputs.draft_s_per_token - inputs.catch_up_per_token) / inputs.baseline_token_s
    loop = 0.0 if whole else inputs.loop_s_per_step / inputs.baseline_token_s
    prices = [1.0]
    for n in range(1, n_max + 1):
        t = probe.t_ratio_at(n + 1, inputs.depth)
        if t is None:
            break
        # the passes that switch width, at the row's shares, as the prediction prices them
        switching = 0.0 if whole else predict.switch_cost(probe, n + 1, inputs)
        prices.append(t + n * per_token + loop + switching)
    return tuple(prices)


def catch_up_price(probe: Probe, inputs: predict.ArmInputs) -> float:
    """The draft's catch-up in baseline tokens, paid by a step after one that
    kept all (:func:`lab.analysis.predict.catch_up`); 0 for a step-priced probe."""
    return 0.0 if probe.prices_steps else inputs.catch_up_s / inputs.baseline_token_s


def _check(n: int, recorded_n_max: int, prices: Sequence[float]) -> None:
    if n > recorded_n_max:
        raise ReplayRefused(f"cannot replay {n} drafts a step from steps recorded at n_max {recorded_n_max}: "
                            "nothing says what the drafts past it would have done; replay from an arm with a "
                            "larger n_max")
    if n >= len(prices):
        raise ReplayRefused(f"the probe does not cover a step of {n} drafts (T({n + 1}))")


def replay_fixed(steps: Sequence[Mapping[str, Any]], n: int, prices: Sequence[float], recorded_n_max: int,
                 plain: int = 0, none: Sequence[float] | None = None, catch_up: float = 0.0) -> Tally:
    """Fixed n, each recorded step its own anchor: min(a, n) + 1 landed at
    C(min(n, d)), ``catch_up`` added after a step that kept all."""
    _check(n, recorded_n_max, prices)
    count = drafted = landed = 0
    cost = 0.0
    full, cell = False, None
    for s in steps:
        d = min(n, int(s["drafted"]))
        if d <= 0:
            continue
        if s.get("round") != cell:
            full, cell = False, s.get("round")
        kept = min(int(s["accepted"]), d)
        count += 1
        drafted += d
        landed += kept + 1
        cost += _priced(prices, none, d, kept) + (catch_up if full else 0.0)
        full = kept >= d
    return Tally(count, drafted, landed, cost, plain)


@dataclass(frozen=True)
class Stream:
    """One cell's text as marks per position (:data:`KEPT`, :data:`REFUSED`,
    :data:`UNDRAFTED`) and the tokens the recorded draft offered from each."""

    marks: tuple[int, ...]
    offered: tuple[int, ...]


def stream(steps: Sequence[Mapping[str, Any]]) -> Stream:
    """A cell's steps (in order) as the stream of its text positions."""
    marks: list[int] = []
    offered: list[int] = []
    for s in steps:
        d, a = int(s["drafted"]), int(s["accepted"])
        recorded = s.get("landed")
        landed = int(recorded) if recorded is not None else a + 1
        these = [KEPT] * a + [REFUSED if a < d else UNDRAFTED]
        for i, mark in enumerate(these[:max(0, landed)]):
            marks.append(mark)
            offered.append(d - i if mark != UNDRAFTED else 0)
    return Stream(tuple(marks), tuple(offered))


def replay_stream(cells: Sequence[Stream], policy: str, n_max: int, prices: Sequence[float], recorded_n_max: int,
                  plain: int = 0, none: Sequence[float] | None = None, catch_up: float = 0.0) -> Tally:
    """A policy re-chunking each cell's text into its own steps, starting at
    n_max as the live loop does; a step after a full keep pays ``catch_up``."""
    _check(n_max, recorded_n_max, prices)
    count = drafted = landed = 0
    cost = 0.0
    for cell in cells:
        marks, offered, end = cell.marks, cell.offered, len(cell.marks)
        length = n_max
        pos = 0
        full = False
        while pos < end:
            d = min(length, offered[pos])
            if d <= 0:
                plain += 1
                pos += 1
                continue
            kept = 0
            while kept < d and pos + kept < end and marks[pos + kept] == KEPT:
                kept += 1
            lands = min(kept + 1, end - pos)
            count += 1
            drafted += d
            landed += lands
            cost += _priced(prices, none, d, kept) + (catch_up if full else 0.0)
            full = kept >= d
            pos += lands
            length = draft_policy.next_length(policy, length, d, kept, n_max)
    return Tally(count, drafted, landed, cost, plain)


@dataclass(frozen=True)
class Replay:
    """Every policy replayed on one arm x prompt's recorded steps (or an
    arm's prompts pooled: prompt :data:`ALL_PROMPTS`)."""

    arm: str
    prompt: str
    category: str | None
    recorded_n_max: int
    rounds: int
    recorded: Tally  # the steps as recorded (fixed n_max, each step its own anchor: the in-sample prediction)
    fixed: Mapping[int, Tally]
    adaptive: Mapping[str, Tally]
    per_category: tuple[int, Tally] | None = None  # (n chosen for the category, its tally)
    measured: float | None = None  # the arm's own paired speedup, median over rounds
    notes: tuple[str, ...] = field(default_factory=tuple)

    def best_fixed(self) -> tuple[int, float] | None:
        ranked = [(n, t.speedup) for n, t in self.fixed.items() if t.speedup is not None]
        if not ranked:
            return None
        top = max(s for _, s in ranked)
        return min(((n, s) for n, s in ranked if s >= top * (1 - TIE)), key=lambda x: x[0])

    def policies(self) -> list[tuple[str, float]]:
        """(name, predicted speedup) of every replayed policy: the best fixed
        n first, then the adaptive ones and the per-category choice."""
        out: list[tuple[str, float]] = []
        bf = self.best_fixed()
        if bf is not None:
            out.append((f"fixed {bf[0]}", bf[1]))
        for name, t in self.adaptive.items():
            if t.speedup is not None:
                out.append((name, t.speedup))
        if self.per_category is not None and self.per_category[1].speedup is not None:
            out.append((PER_CATEGORY, self.per_category[1].speedup))
        return out

    def best(self) -> tuple[str, float] | None:
        """The policy with the highest predicted speedup; the best fixed n
        unless another beats it by more than :data:`TIE`."""
        ranked = self.policies()
        if not ranked:
            return None
        top = max(ranked[1:], key=lambda x: x[1], default=None)
        return top if top is not None and top[1] > ranked[0][1] * (1 + TIE) else ranked[0]

    def headroom(self) -> float | None:
        """The best policy's predicted speedup over the best fixed n's."""
        bf, top = self.best_fixed(), self.best()
        return top[1] / bf[1] if bf and top and bf[1] else None

    def to_json(self) -> dict[str, Any]:
        bf, top = self.best_fixed(), self.best()
        return {
            "arm": self.arm, "prompt": self.prompt, "category": self.category,
            "recorded_n_max": self.recorded_n_max, "rounds": self.rounds,
            "steps": self.recorded.steps, "tokens": self.recorded.tokens,
            "measured": self.measured, "recorded_predicted": self.recorded.speedup,
            "fixed": [{"n": n, "speedup": t.speedup, "steps": t.steps, "landed": t.landed, "cost": t.cost}
                      for n, t in sorted(self.fixed.items())],
            "adaptive": [{"policy": p, "speedup": t.speedup, "steps": t.steps, "drafted": t.drafted,
                          "landed": t.landed, "plain": t.plain, "cost": t.cost} for p, t in self.adaptive.items()],
            "per_category": ({"n": self.per_category[0], "speedup": self.per_category[1].speedup}
                             if self.per_category else None),
            "best_fixed_n": bf[0] if bf else None, "best_fixed": bf[1] if bf else None,
            "best_policy": top[0] if top else None, "best_predicted": top[1] if top else None,
            "headroom": self.headroom(), "notes": list(self.notes),
        }


@dataclass(frozen=True)
class LiveCheck:
    """An arm that ran a policy live, beside that policy replayed from the
    fixed arm of the same drafter with the largest n_max at least its own."""

    arm: str
    prompt: str
    policy: str
    n_max: int
    source: str
    predicted: float | None
    best_fixed_n: int | None
    best_fixed: float | None
    measured: float | None
    measured_fixed: float | None  # an arm of the best fixed n, measured, where the run has one

    @property
    def predicted_gain(self) -> float | None:
        return self.predicted / self.best_fixed if self.predicted and self.best_fixed else None

    @property
    def measured_gain(self) -> float | None:
        return self.measured / self.measured_fixed if self.measured and self.measured_fixed else None

    @property
    def error(self) -> float | None:
        return self.predicted / self.measured - 1 if self.predicted and self.measured else None

    def to_json(self) -> dict[str, Any]:
        return {
            "arm": self.arm, "prompt": self.prompt, "policy": self.policy, "n_max": self.n_max,
            "source": self.source, "predicted": self.predicted, "best_fixed_n": self.best_fixed_n,
            "best_fixed": self.best_fixed, "predicted_gain": self.predicted_gain, "measured": self.measured,
            "measured_fixed": self.measured_fixed, "measured_gain": self.measured_gain, "error": self.error,
        }


def row_policy(row: Mapping[str, Any]) -> str:
    """The policy a row ran; rows saved before policies ran fixed."""
    return str(row.get("draft_policy") or draft_policy.FIXED)


def _ok(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in rows if r.get("status") == "ok" and int(r.get("round", 1)) >= 1]


def _cells(steps: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], dict[int, list[Mapping[str, Any]]]]:
    """Steps by arm x prompt, then by round, each round's in step order."""
    out: dict[tuple[str, str], dict[int, list[Mapping[str, Any]]]] = {}
    for s in steps:
        rnd = int(s.get("round", 1))
        if rnd < 1:
            continue
        out.setdefault((s["arm"], s["prompt"]), {}).setdefault(rnd, []).append(s)
    for rounds in out.values():
        for cell in rounds.values():
            cell.sort(key=lambda s: int(s.get("index", 0)))
    return out


def _plain(rows: Sequence[Mapping[str, Any]]) -> int:
    # the first token comes with the prompt, not from the loop (as predict.arm_inputs counts it)
    return sum(max(0, int(r.get("plain_tokens") or 0) - 1) for r in rows)


def _measured(results: Sequence[Mapping[str, Any]], arm: str, prompt: str) -> float | None:
    ratios = stats.paired_ratios(results, arm, prompt)
    return statistics.median(x for _, _, x in ratios) if ratios else None


def replay_cell(
    arm: str, prompt: str, rows: Sequence[Mapping[str, Any]], rounds: Mapping[int, Sequence[Mapping[str, Any]]],
    probe: Probe, bound: int | None = None,
) -> Replay | None:
    """Every policy on one arm x prompt, up to ``bound`` drafts a step (the
    recorded n_max when None). None when its rows cannot price a step."""
    ok = _ok(rows)
    kept_rounds = {int(r["round"]) for r in ok}
    cells = [rounds[k] for k in sorted(rounds) if k in kept_rounds]
    flat = [s for cell in cells for s in cell]
    inputs = predict.arm_inputs(ok, flat)
    if inputs is None or not cells:
        return None
    recorded_n_max = int(inputs.n_max) if inputs.n_max else max(int(s["drafted"]) for s in flat)
    prices = step_prices(probe, inputs, recorded_n_max)
    top = min(bound or recorded_n_max, recorded_n_max, len(prices) - 1)
    if top < 1:
        return None
    plain = _plain(ok)
    notes = []
    if top < recorded_n_max:
        notes.append(f"the probe covers steps of up to {top} drafts, fewer than the {recorded_n_max} recorded")
    streams = [stream(c) for c in cells]
    none = kept_none_prices(probe, recorded_n_max)
    c = catch_up_price(probe, inputs)
    fixed = {n: replay_stream(streams, draft_policy.FIXED, n, prices, recorded_n_max, plain, none, c)
             for n in range(1, top + 1)}
    adaptive = {p: replay_stream(streams, p, top, prices, recorded_n_max, plain, none, c) for p in ADAPTIVE}
    recorded = replay_fixed(flat, top, prices, recorded_n_max, plain, none, c)
    return Replay(arm, prompt, ok[0].get("category"), recorded_n_max, len(cells), recorded, fixed, adaptive,
                  notes=tuple(notes))


def replays(results: Sequence[Mapping[str, Any]], steps: Sequence[Mapping[str, Any]],
            probes: Sequence[Probe]) -> list[Replay]:
    """Every fixed-policy speculative arm x prompt with steps, replayed, then
    one pooled :data:`ALL_PROMPTS` replay per arm of several prompts (its
    per-category policy, where rows carry categories, is chosen there)."""
    if not probes:
        return []
    cells = _cells(steps)
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in results:
        if r.get("is_baseline") or not (r.get("drafter") or r.get("n_max")):
            continue
        groups.setdefault((r["arm"], r["prompt"]), []).append(r)
    out: list[Replay] = []
    for (arm, prompt), rows in groups.items():
        if row_policy(rows[0]) != draft_policy.FIXED or (arm, prompt) not in cells:
            continue
        probe, _ = predict.probe_for(rows[0], probes)
        if probe is None or not probe.trusted:
            continue
        rep = replay_cell(arm, prompt, rows, cells[(arm, prompt)], probe)
        if rep is not None:
            out.append(_with_measured(rep, results))
    return _pooled(out)


def _with_measured(rep: Replay, results: Sequence[Mapping[str, Any]]) -> Replay:
    return replace(rep, measured=_measured(results, rep.arm, rep.prompt))


def _pooled(per_prompt: list[Replay]) -> list[Replay]:
    by_arm: dict[str, list[Replay]] = {}
    for rep in per_prompt:
        by_arm.setdefault(rep.arm, []).append(rep)
    out: list[Replay] = []
    for arm, reps in by_arm.items():
        chosen = _category_choice(reps)
        if chosen:
            reps = [_with_category(r, chosen) for r in reps]
        out += reps
        if len(reps) < 2:
            continue
        ns = set.intersection(*(set(r.fixed) for r in reps))
        fixed = {n: _sum(r.fixed[n] for r in reps) for n in sorted(ns)}
        adaptive = {p: _sum(r.adaptive[p] for r in reps) for p in reps[0].adaptive}
        per_cat = (0, _sum(r.per_category[1] for r in reps if r.per_category)) if chosen else None
        out.append(Replay(arm, ALL_PROMPTS, None, min(r.recorded_n_max for r in reps), max(r.rounds for r in reps),
                          _sum(r.recorded for r in reps), fixed, adaptive, per_cat,
                          notes=("the per-category policy takes each category's own best fixed n",) if chosen else ()))
    return out


def _sum(tallies: Any) -> Tally:
    total = Tally()
    for t in tallies:
        total = total + t
    return total


def _category_choice(reps: Sequence[Replay]) -> dict[str, int]:
    """Each category's best fixed n over its prompts' pooled steps; empty
    when no prompt carries a category."""
    by_cat: dict[str, list[Replay]] = {}
    for r in reps:
        if r.category:
            by_cat.setdefault(r.category, []).append(r)
    chosen: dict[str, int] = {}
    for cat, group in by_cat.items():
        ns = set.intersection(*(set(r.fixed) for r in group))
        pooled = {n: _sum(r.fixed[n] for r in group).speedup for n in ns}
        ranked = [(n, s) for n, s in pooled.items() if s is not None]
        if ranked:
            top = max(s for _, s in ranked)
            chosen[cat] = min(n for n, s in ranked if s >= top * (1 - TIE))
    return chosen


def _with_category(rep: Replay, chosen: Mapping[str, int]) -> Replay:
    n = chosen.get(rep.category or "")
    if n is None or n not in rep.fixed:
        return rep
    return replace(rep, per_category=(n, rep.fixed[n]))


def live_checks(results: Sequence[Mapping[str, Any]], steps: Sequence[Mapping[str, Any]],
                probes: Sequence[Probe]) -> list[LiveCheck]:
    """Every arm x prompt that ran an adaptive policy live (:class:`LiveCheck`)."""
    cells = _cells(steps)
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in results:
        if not r.get("is_baseline"):
            groups.setdefault((r["arm"], r["prompt"]), []).append(r)
    out: list[LiveCheck] = []
    for (arm, prompt), rows in groups.items():
        policy = row_policy(rows[0])
        n_max = rows[0].get("n_max")
        if policy == draft_policy.FIXED or not n_max:
            continue
        sources = [
            (int(rs[0]["n_max"]), a) for (a, p), rs in groups.items()
            if p == prompt and a != arm and row_policy(rs[0]) == draft_policy.FIXED and rs[0].get("n_max")
            and int(rs[0]["n_max"]) >= int(n_max) and rs[0].get("drafter") == rows[0].get("drafter")
            and rs[0].get("draft_config") == rows[0].get("draft_config") and (a, p) in cells
        ]
        if not sources:
            continue
        _, source = max(sources)
        probe, _ = predict.probe_for(groups[(source, prompt)][0], probes)
        if probe is None or not probe.trusted:
            continue
        rep = replay_cell(source, prompt, groups[(source, prompt)], cells[(source, prompt)], probe, int(n_max))
        if rep is None or policy not in rep.adaptive:
            continue
        bf = rep.best_fixed()
        fixed_arm = next((a for (a, p), rs in groups.items() if p == prompt and bf and rs[0].get("n_max") == bf[0]
                          and row_policy(rs[0]) == draft_policy.FIXED
                          and rs[0].get("draft_config") == rows[0].get("draft_config")), None)
        out.append(LiveCheck(
            arm, prompt, policy, int(n_max), source, rep.adaptive[policy].speedup,
            bf[0] if bf else None, bf[1] if bf else None, _measured(results, arm, prompt),
            _measured(results, fixed_arm, prompt) if fixed_arm else None,
        ))
    return out


def policy_json(results: Sequence[Mapping[str, Any]], steps: Sequence[Mapping[str, Any]] | None,
                probes: Sequence[Probe]) -> dict[str, Any] | None:
    """The JSON export's ``analysis.draft_policy``; None without steps or a probe."""
    if steps is None or not probes:
        return None
    return {
        "replays": [r.to_json() for r in replays(results, steps, probes)],
        "live": [c.to_json() for c in live_checks(results, steps, probes)],
        "notes": [CONFIDENCE_NOTE],
    }
