"""What a report opens with: one sentence per stack (each speculative arm
against the baseline of its own backend and model) saying whether it pays,
by how much, why in step arithmetic, and what to run next; then how the
cells were ordered, and the run's conditions in one line.

The verdicts are the summaries' (:func:`lab.analysis.run.summarize`): this
module only words them."""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from lab.base import economics as econ_kinds

# More prompts than this and an arm's clause counts them by kind instead of naming each.
NAMED_PROMPTS = 3
# Step costs within this share of each other are said as one figure.
SAME_COST = 0.10

_KIND_WORDS = {
    econ_kinds.PAYS: "pays",
    econ_kinds.EVEN: "breaks even",
    econ_kinds.LOSES: "loses",
    econ_kinds.STRUCTURAL: "is a structural loss",
    econ_kinds.UNCERTAIN: "is uncertain",
    econ_kinds.FAILED: "failed",
    econ_kinds.NO_STEPS: "never drafted",
    econ_kinds.NO_BASELINE: "has no baseline to compare with",
    econ_kinds.CANCELLED: "was cancelled",
    econ_kinds.SKIPPED: "was skipped",
}
# the order the kinds are said in when an arm's prompts differ
_KIND_ORDER = (econ_kinds.PAYS, econ_kinds.EVEN, econ_kinds.LOSES, econ_kinds.STRUCTURAL, econ_kinds.UNCERTAIN)


def _change(speedup: float | None) -> str:
    return "—" if speedup is None else f"{(speedup - 1) * 100:+.0f} %"


def _stack_name(base: Mapping[str, Any] | None, arms: Sequence[Mapping[str, Any]]) -> str:
    first = base or arms[0]
    backend = str(first.get("backend") or "?")
    model = first.get("model")
    return f"{backend} / {model}" if model else backend


def _stacks(results: Sequence[Mapping[str, Any]], summaries: Sequence[Mapping[str, Any]]
            ) -> list[tuple[str, list[Mapping[str, Any]]]]:
    """(the stack's words, its speculative summaries) per baseline, in the
    run's arm order."""
    model_of = {r["arm"]: r.get("model") for r in results if r.get("model")}
    groups: dict[str, list[Mapping[str, Any]]] = {}
    bases: dict[str, Mapping[str, Any]] = {}
    for s in summaries:
        if s["is_baseline"]:
            bases.setdefault(s["arm"], {**s, "model": model_of.get(s["arm"])})
            continue
        groups.setdefault(str(s.get("baseline_arm") or ""), []).append({**s, "model": model_of.get(s["arm"])})
    return [(_stack_name(bases.get(base), rows), rows) for base, rows in groups.items()]


def _kind(s: Mapping[str, Any]) -> str:
    return str(s["verdict_kind"])


def _measured(s: Mapping[str, Any]) -> str:
    """The verdict as measured: for a cell called uncertain because the
    machine was busy, what its figures say (lab.base.economics.classify
    without the busy flag)."""
    if _kind(s) != econ_kinds.UNCERTAIN:
        return _kind(s)
    return econ_kinds.classify({**s, "status": "ok", "contended": False}).kind


def _busy(s: Mapping[str, Any]) -> bool:
    """Uncertain, for either reason: the machine was busy, or the cell's
    paired rounds disagree."""
    return _kind(s) == econ_kinds.UNCERTAIN


def _unsure_why(rows: Sequence[Mapping[str, Any]]) -> str:
    """Why cells are uncertain, in the words a change or a name carries."""
    busy = [bool(s.get("contended")) for s in rows]
    if all(busy):
        return "the machine was busy"
    return "its rounds disagree" if not any(busy) else "a busy machine, rounds that disagree"


def _tag(s: Mapping[str, Any]) -> str:
    return "busy" if s.get("contended") else "rounds disagree"


def _cost_and_landed(rows: Sequence[Mapping[str, Any]], named: bool, say_prompt: bool = False) -> str:
    """What a step costs and lands, in baseline tokens, over one arm's
    prompts: one cost where they agree, else each prompt's; ``say_prompt``:
    name the prompt of a single row too (the arm has others)."""
    priced = [s for s in rows if s.get("step_cost_tokens") and s.get("mean_accepted_len") is not None]
    if not priced:
        return ""
    costs = [float(s["step_cost_tokens"]) for s in priced]
    lands = [float(s["mean_accepted_len"]) for s in priced]
    one = max(costs) <= min(costs) * (1 + SAME_COST)
    if len(priced) == 1:
        where = f"on {priced[0]['prompt']} " if say_prompt else ""
        return f"{where}a step costs {costs[0]:.2f} baseline tokens and lands {lands[0]:.2f}"
    if not named:
        return (f"a step costs {min(costs):.2f}–{max(costs):.2f} baseline tokens and lands "
                f"{min(lands):.2f}–{max(lands):.2f}")
    if one:
        cost = sum(costs) / len(costs)
        landed = ", ".join(f"{x:.2f} on {s['prompt']}" for s, x in zip(priced, lands))
        if len({f"{x:.2f}" for x in lands}) == 1:
            landed = f"{lands[0]:.2f} on {'both' if len(lands) == 2 else 'each'}"
        return f"a step costs {cost:.2f} baseline tokens and lands {landed}"
    each = [f"costs {c:.2f} and lands {x:.2f} on {s['prompt']}" for s, c, x in zip(priced, costs, lands)]
    each[0] = each[0].replace(" and", " baseline tokens and", 1)
    return "a step " + ", ".join(each)


def _structural_why(rows: Sequence[Mapping[str, Any]]) -> str:
    costs = [float(s["step_cost_tokens"]) for s in rows if s.get("step_cost_tokens")]
    yields = {s.get("max_yield") for s in rows if s.get("max_yield")}
    if not costs or len(yields) != 1:
        return "a step costs more baseline tokens than it can land"
    cost = f"{costs[0]:.1f}" if len(costs) == 1 or max(costs) - min(costs) < 0.05 else f"{min(costs):.1f}–{max(costs):.1f}"
    return f"a step costs {cost} baseline tokens and can land at most {next(iter(yields))}"


def _by_prompt(rows: Sequence[Mapping[str, Any]], busy_said: bool = False) -> str:
    """Each prompt's change (marked where the machine was busy, unless the
    arm's clause said so once), or the range of changes over many prompts."""
    with_speedup = [s for s in rows if s.get("speedup") is not None]
    if not with_speedup:
        return ""

    def one(s: Mapping[str, Any]) -> str:
        return _change(s["speedup"]) + (f", {_tag(s)}" if _busy(s) and not busy_said else "")

    if len(rows) == 1:
        return one(with_speedup[0])
    if len(rows) <= NAMED_PROMPTS:
        return ", ".join(f"{one(s)} on {s['prompt']}" for s in with_speedup)
    lo = min(float(s["speedup"]) for s in with_speedup)
    hi = max(float(s["speedup"]) for s in with_speedup)
    return f"{_change(lo)} to {_change(hi)}"


def arm_clause(rows: Sequence[Mapping[str, Any]]) -> str:
    """One arm over its prompts: its verdict as measured (per prompt where
    they differ; a cell on a busy machine marked uncertain), the changes,
    and the step arithmetic behind them."""
    arm = rows[0]["arm"]
    kinds = [_measured(s) for s in rows]
    named = len(rows) <= NAMED_PROMPTS
    all_busy = all(_busy(s) for s in rows)
    name = f"{arm} (uncertain: {_unsure_why(rows)})" if all_busy else arm
    if len(set(kinds)) == 1:
        kind = kinds[0]
        where = "" if len(rows) == 1 else (" on both prompts" if len(rows) == 2 else
                                            f" on all {len(rows)} prompts")
        changes = _by_prompt(rows, all_busy)
        head = f"{name} {_KIND_WORDS.get(kind, kind)}{where}" + (f" ({changes})" if changes else "")
    elif named:
        parts = []
        for kind in sorted(set(kinds), key=lambda k: _KIND_ORDER.index(k) if k in _KIND_ORDER else len(_KIND_ORDER)):
            mine = [s for s, k in zip(rows, kinds) if k == kind]
            said = ", ".join(f"{s['prompt']} ({_by_prompt([s], all_busy)})" for s in mine)
            parts.append(f"{_KIND_WORDS.get(kind, kind)} on {said}")
        head = f"{name} " + " and ".join(parts)
    else:
        counts = [f"{_KIND_WORDS.get(k, k)} on {kinds.count(k)}" for k in dict.fromkeys(kinds)]
        head = f"{name} " + ", ".join(counts) + f" of {len(rows)} prompts ({_by_prompt(rows, True)})"
    why = _why(rows, kinds, named)
    return head + (f": {why}" if why else "")


def _why(rows: Sequence[Mapping[str, Any]], kinds: Sequence[str], named: bool) -> str:
    if all(k == econ_kinds.STRUCTURAL for k in kinds):
        return _structural_why(rows) + ", so no acceptance can pay"
    structural = [s for s, k in zip(rows, kinds) if k == econ_kinds.STRUCTURAL]
    rest = [s for s, k in zip(rows, kinds) if k != econ_kinds.STRUCTURAL]
    if not structural:
        return _cost_and_landed(rows, named)
    return "; ".join(x for x in (_cost_and_landed(rest, named, say_prompt=True),
                                 f"on {', '.join(s['prompt'] for s in structural)} " + _structural_why(structural)) if x)


def next_step(rows: Sequence[Mapping[str, Any]]) -> str:
    """What to run next on a stack, from its arms' verdicts: what would
    settle or change the answer, most pressing first."""
    losing = [s for s in rows if _measured(s) == econ_kinds.LOSES and s.get("needed_acceptance") is not None]
    structural = list(dict.fromkeys(s["arm"] for s in rows if _measured(s) == econ_kinds.STRUCTURAL))
    paying = [s for s in rows if _measured(s) == econ_kinds.PAYS and s.get("speedup") is not None]
    said = []
    unsure = list(dict.fromkeys(s["arm"] for s in rows if _busy(s) and s.get("contended")))
    if unsure:
        said.append(f"run {', '.join(unsure)} again on a quiet machine to settle {'it' if len(unsure) == 1 else 'them'}")
    split = list(dict.fromkeys(s["arm"] for s in rows if _busy(s) and not s.get("contended")))
    if split:
        said.append(f"run {', '.join(split)} with more rounds (`[run] rounds`, `max_rounds`) to settle "
                    f"{'it' if len(split) == 1 else 'them'}: its paired rounds disagree")
    if paying:
        best = max(paying, key=lambda s: float(s["speedup"]))
        said.append(f"keep {best['arm']} ({float(best['speedup']):.2f}x on {best['prompt']})")
    for s in losing[:1]:
        need = float(s["needed_acceptance"])
        got = s.get("acceptance_rate")
        have = f", it got {float(got) * 100:.0f} %" if got is not None else ""
        if need <= 1:
            said.append(f"{s['arm']} on {s['prompt']} needs {need * 100:.0f} % acceptance at n_max {s.get('n_max')}"
                        f"{have}: try a lower n_max or a drafter closer to the target")
        else:
            said.append(f"{s['arm']} on {s['prompt']} cannot break even at n_max {s.get('n_max')}: try a lower n_max")
    # a step that is nearly all verify is the backend's to make cheaper, the rest the draft's
    by_verify = [a for a in structural if _verify_bound([s for s in rows if s["arm"] == a])]
    by_draft = [a for a in structural if a not in by_verify]
    if by_draft:
        said.append(f"{', '.join(by_draft)} can pay only with a cheaper step (a faster draft or a lower n_max), "
                    "not with better acceptance")
    if by_verify:
        said.append(f"for {', '.join(by_verify)} the verify alone costs more than a step can land: this backend "
                    "does not amortize a batch here (T(w) at or above w), so no drafter pays until it does (more "
                    "free cores, another backend)")
    return "; ".join(said)


# A step whose draft takes less than this share of it is priced by its verify.
VERIFY_BOUND = 0.1


def _verify_bound(rows: Sequence[Mapping[str, Any]]) -> bool:
    shares = [float(s["draft_s"]) / float(s["step_s"]) for s in rows
              if s.get("draft_s") is not None and s.get("step_s")]
    return bool(shares) and max(shares) < VERIFY_BOUND


def _loops(rows: Sequence[Mapping[str, Any]]) -> str:
    """Where a stack's outputs loop, once for all its arms (greedy arms
    write what their baseline writes)."""
    looped = list(dict.fromkeys(str(s["prompt"]) for s in rows if s.get("degenerate_output")))
    if not looped:
        return ""
    return f" (the output loops on {', '.join(looped)}: acceptance there is not representative)"


def sentences(results: Sequence[Mapping[str, Any]], summaries: Sequence[Mapping[str, Any]]) -> list[str]:
    """One sentence per stack: does it pay, by how much, why, and what next."""
    out = []
    for stack, rows in _stacks(results, summaries):
        by_arm: dict[str, list[Mapping[str, Any]]] = {}
        for s in rows:
            by_arm.setdefault(str(s["arm"]), []).append(s)
        clauses = "; ".join(arm_clause(arm_rows) for arm_rows in by_arm.values())
        then = next_step(rows)
        out.append(f"**{stack}**: {clauses}{_loops(rows)}." + (f" Next: {then}." if then else ""))
    if not out:
        bases = [s for s in summaries if s["is_baseline"]]
        out.append("No speculative arm ran against a baseline: nothing to answer yet."
                   if bases or not summaries else "No cell finished: nothing to answer yet.")
    return out


def order_line(order: Any) -> str | None:
    """How the cells were ordered and which engines stayed loaded between
    their cells (results.json's ``order``); None for a run saved without it."""
    if not isinstance(order, Mapping) or not isinstance(order.get("words"), str):
        return None
    line = f"Cells ran {order['words']}."
    groups = [g for g in order.get("groups") or () if isinstance(g, Mapping)]
    kept = [str(a) for g in groups for a in g.get("resident") or ()]
    arms = [str(a) for g in groups for a in g.get("arms") or ()]
    notes = [str(g["note"]) for g in groups if g.get("note")]
    why = f" ({'; '.join(dict.fromkeys(notes))})" if notes else ""
    if kept:
        reloaded = [a for a in arms if a not in kept]
        line += f" Engines kept loaded between cells: {', '.join(kept)}{why}"
        line += f"; loaded again for each cell, outside the timing: {', '.join(reloaded)}." if reloaded else "."
    elif arms:
        line += f" Every engine was loaded again for each cell, outside the timing{why}."
    added = [a for a in order.get("added") or () if isinstance(a, Mapping)]
    if added:
        rounds = ", ".join(f"r{a.get('round')}" for a in added)
        cells = list(dict.fromkeys(c for a in added for c in _DISAGREED.findall(str(a.get("why") or ""))))
        line += (f" Rounds added because paired speedups disagreed: {rounds}"
                 + (f" ({', '.join(cells)})" if cells else "") + "; why in results.json's order.added.")
    return line


# an arm / prompt a round was added for, as lab.arms.order words it
_DISAGREED = re.compile(r"([^\s;(),]+ / [^\s;(),]+) (?:spread|pays in one)")


def conditions_summary(results: Sequence[Mapping[str, Any]]) -> str:
    """The Conditions section in one line: how busy the machine was, whether
    every arm sent one text per prompt, whether any output looped."""
    measured = [r for r in results if r.get("contention") is not None and _round(r) >= 1]
    parts = []
    if measured:
        busy = [r for r in measured if r.get("contended")]
        load = [float(r["contention"]) for r in measured]
        if busy:
            parts.append(f"⚠ busy machine in {len(busy)} of {len(measured)} cells (other processes used "
                         f"{min(load):.2f}–{max(load):.2f} cores)")
        else:
            parts.append(f"quiet machine (other processes used at most {max(load):.2f} cores)")
    texts: dict[str, set[str]] = {}
    for r in results:
        if r.get("status") == "ok" and r.get("prompt_sha256") and _round(r) >= 1:
            texts.setdefault(str(r["prompt"]), set()).add(str(r["prompt_sha256"]))
    if texts:
        differ = [p for p, shas in texts.items() if len(shas) > 1]
        parts.append(f"⚠ arms sent different texts for {', '.join(differ)}" if differ
                     else "one text per prompt on every arm")
    checked = [r for r in results if r.get("status") == "ok" and r.get("text")]
    if checked:
        looped = {f"{r['arm']} / {r['prompt']}" for r in checked if r.get("degenerate_output")}
        parts.append(f"⚠ output loops in {', '.join(sorted(looped))}" if looped else "no output loops")
    return ("In short: " + "; ".join(parts) + ".") if parts else ""


def _round(r: Mapping[str, Any]) -> int:
    value = r.get("round", 1)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 1
