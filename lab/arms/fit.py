"""Which of a group's engines stay loaded between their cells.

Paired cells want every engine of a group loaded at once, so that an arm's
cell follows its baseline's without a load between them. Each arm's expected
memory (:func:`lab.profile.fit.estimate_arm`, from its backend's needs and its
models' headers) is summed per place it runs (RAM, the card, Metal) against
what is free there now (:func:`lab.telemetry.budget.read_budget`). Where the
group would not fit together, the baseline stays loaded and each other arm
loads before its cell and closes after it, off the clock; where not even
that fits, every cell loads its own engine. The report says which."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from lab.base.profile import Arm, Profile

if TYPE_CHECKING:
    from lab.registry import Registry

# share of the free memory a plan may fill: the rest is the machine's (and the estimate's error)
_HEADROOM = 0.85


@dataclass(frozen=True)
class Residency:
    """The arms that stay loaded between their cells, and why."""

    resident: frozenset[str]
    note: str


def _size(count: int) -> str:
    return f"{count / 2**30:.1f} GiB"


def residency(group: Sequence[Arm], profile: Profile, registry: Registry) -> Residency:
    names = frozenset(a.name for a in group)
    if profile.run.order == "arms" or len(group) < 2:
        return Residency(names, "")
    from lab.profile.fit import estimate_arm
    from lab.telemetry.budget import read_budget

    sizes: dict[str, tuple[str, int]] = {}
    for arm in group:
        try:
            got = estimate_arm(arm, profile.run, registry)
        except Exception:  # noqa: BLE001 - an estimate that fails tells nothing: the engines load as asked
            got = None
        if got is None:
            return Residency(names, f"all loaded at once (the memory of {arm.name} could not be told before loading)")
        sizes[arm.name] = (got.where, got.total)
    need: dict[str, int] = defaultdict(int)
    for where, count in sizes.values():
        need[where] += count
    free: dict[str, int] = {}
    for where in need:
        budget = read_budget(where)  # type: ignore[arg-type]
        if budget is None:
            return Residency(names, f"all loaded at once (no memory reading for {where})")
        free[where] = budget.bytes

    def fits(arms: Sequence[Arm]) -> tuple[bool, str]:
        want: dict[str, int] = defaultdict(int)
        for a in arms:
            where, count = sizes[a.name]
            want[where] += count
        said = ", ".join(f"{_size(v)} expected of {_size(free[w])} free ({w})" for w, v in want.items())
        return all(v <= free[w] * _HEADROOM for w, v in want.items()), said

    together, said = fits(group)
    if together:
        return Residency(names, f"all loaded at once ({said})")
    base = [a for a in group if a.baseline is None]
    others = [a for a in group if a.baseline is not None]
    largest = max(others, key=lambda a: sizes[a.name][1])
    pair, pair_said = fits([*base, largest])
    if pair:
        return Residency(frozenset(a.name for a in base),
                         f"the baseline kept loaded, each other arm loaded for its cell and closed after, off the "
                         f"clock (all together: {said})")
    return Residency(frozenset(), f"each cell loads its own engine, off the clock (a baseline beside the largest "
                                  f"arm: {pair_said})")
