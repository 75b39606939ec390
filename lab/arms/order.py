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
(:mod:`lab.arms.fit`); the order is the same either way."""

from __future__ import annotations

from dataclasses import dataclass

from lab.base.cells import Cell
from lab.base.profile import Arm, Profile


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
