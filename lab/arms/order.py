"""The order a run's cells take.

``[run] order = "paired"`` (the default): the arms that share a baseline
form a group, and the group runs one prompt and round at a time, its
baseline's cell first, then each of its arms' cells, the arms' turn within
the slot rotating from one slot to the next. An arm's speedup then comes
from cells seconds apart, not minutes: a machine whose load changes during
the run moves both sides of a pair alike. ``"arms"``: every cell of one arm,
then the next arm's (baselines first), as a run with one engine loaded at a
time needs.

Which engines stay loaded between their cells is the runner's to decide
(:mod:`lab.arms.fit`); the order is the same either way.

Paired, the rounds adapt to noise: while a prompt's paired speedups
disagree (one round says the arm pays, another that it loses, or they
spread more than :data:`SPREAD` around their median), the run adds a round
of that prompt for the whole group, up to ``[run] max_rounds`` (default two
more than ``rounds``, from two rounds up) and while the added rounds have
taken less than :data:`EXTRA_SHARE` of the time the planned cells took."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Sequence

from lab.base.cells import Cell, Status
from lab.base.profile import Arm, Profile, RunSettings

# paired speedups of one arm and prompt that spread more than this around their median disagree
SPREAD = 0.10
# added rounds may take at most this share of the time the planned cells took
EXTRA_SHARE = 0.5
# added rounds by default, beyond the profile's
EXTRA_ROUNDS = 2


@dataclass(frozen=True)
class Slot:
    """One measured cell of one arm, in the run's order."""

    arm: Arm
    cell: Cell


def arm_cells(profile: Profile, arm: Arm) -> list[Cell]:
    """An arm's measured cells: every prompt x round, or the one prompt its
    set acceptance was measured on."""
    only = arm.acceptance.prompt if arm.acceptance is not None else None
    return [Cell(arm.name, p.name, r) for p in profile.prompts if only is None or p.name == only
            for r in range(1, profile.run.rounds + 1)]


def groups(profile: Profile) -> list[list[Arm]]:
    """Arms joined by who is whose baseline, each group in run order
    (:meth:`Profile.ordered_arms`: an arm after the arm it is held to)."""
    order = profile.ordered_arms()
    root: dict[str, str] = {}

    def find(name: str) -> str:
        while root.get(name, name) != name:
            name = root[name]
        return name

    for arm in order:
        root.setdefault(arm.name, arm.name)
        if arm.baseline is not None and arm.baseline in {a.name for a in order}:
            root.setdefault(arm.baseline, arm.baseline)
            root[find(arm.name)] = find(arm.baseline)
    out: dict[str, list[Arm]] = {}
    for arm in order:
        out.setdefault(find(arm.name), []).append(arm)
    return list(out.values())


def plan(profile: Profile) -> list[Slot]:
    """Every measured cell of the run, in the order it runs."""
    if profile.run.order == "arms":
        return [Slot(arm, cell) for arm in profile.ordered_arms() for cell in arm_cells(profile, arm)]
    slots: list[Slot] = []
    for group in groups(profile):
        cells = {arm.name: arm_cells(profile, arm) for arm in group}
        keys = list(dict.fromkeys((c.prompt, c.round) for arm in group for c in cells[arm.name]))
        # an arm's turn rotates only among arms that wait for no other arm of the
        # group within the slot (held to the group's baseline, not to each other)
        first = [a for a in group if a.baseline is None or a.baseline not in {b.name for b in group}]
        held = [a for a in group if a not in first]
        movable = [a for a in held if not any(b.baseline == a.name for b in held)
                   and all(b.name != a.baseline for b in held)]
        fixed = [a for a in held if a not in movable]
        for i, (prompt, round) in enumerate(keys):
            turn = movable[i % len(movable):] + movable[:i % len(movable)] if movable else []
            for arm in [*first, *turn, *fixed]:
                cell = Cell(arm.name, prompt, round)
                if cell in cells[arm.name]:
                    slots.append(Slot(arm, cell))
    return slots


def describe(profile: Profile) -> str:
    """The order in the report's words."""
    if profile.run.order == "arms":
        return "arm by arm: each arm's cells after the previous arm's ([run] order = \"arms\")"
    return ("paired: each prompt and round ran its baseline's cell, then every arm's beside it, the arms' "
            "turn rotating ([run] order = \"paired\")")


def max_rounds(run: RunSettings) -> int:
    """Rounds a prompt may reach with those added for noise."""
    if run.max_rounds is not None:
        return max(run.max_rounds, run.rounds)
    # warm rounds are a trend, not repeats: that they differ is what they measure
    if run.order != "paired" or run.rounds < 2 or run.warm_rounds:
        return run.rounds
    return run.rounds + EXTRA_ROUNDS


def disagreement(speedups: Sequence[float]) -> str | None:
    """Why a prompt's paired speedups of one arm disagree, or None."""
    if len(speedups) < 2:
        return None
    lo, hi, mid = min(speedups), max(speedups), statistics.median(speedups)
    shown = ", ".join(f"{x:.2f}x" for x in speedups)
    if lo < 1.0 <= hi:
        return f"pays in one round and loses in another ({shown})"
    if mid > 0 and (hi - lo) / mid > SPREAD:
        return f"spread {(hi - lo) / mid:.0%} around {mid:.2f}x ({shown})"
    return None


def extra_slots(profile: Profile, rows: Sequence[Any], round: int,
                only: Sequence[Arm] | None = None) -> tuple[list[Slot], str]:
    """Paired slots of ``round`` for every group (or the group ``only``) and
    prompt whose arms' paired speedups disagree so far, and why (empty: all agree)."""
    slots: list[Slot] = []
    why: list[str] = []
    for group in groups(profile) if only is None else [list(only)]:
        for prompt in profile.prompts:
            reasons = []
            for arm in group:
                if arm.baseline is None:
                    continue
                got = [r for r in rows if r.arm == arm.name and r.prompt == prompt.name and r.round >= 1]
                if not got or any(r.status != Status.OK or r.speedup is None for r in got):
                    continue
                said = disagreement([float(r.speedup) for r in sorted(got, key=lambda r: r.round)])
                if said:
                    reasons.append(f"{arm.name} / {prompt.name} {said}")
            if not reasons:
                continue
            why += reasons
            for arm in group:
                if any(c.prompt == prompt.name for c in arm_cells(profile, arm)):
                    slots.append(Slot(arm, Cell(arm.name, prompt.name, round)))
    return slots, "; ".join(why)
