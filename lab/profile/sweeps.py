"""Sweeps: a list given for n_max or for a non-list option makes one arm per
value, and several lists their cartesian product. The product is counted
before anything is built, and capped (:data:`lab.base.limits.MAX_ARMS`).
Generated names go through the same rules as written ones."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Sequence

from lab.base.draft_policy import FIXED
from lab.base.limits import MAX_ARMS
from lab.base.profile import Arm, Deadlines
from lab.base.set_acceptance import SetAcceptance
from lab.profile.errors import KeyPath, Source, shown
from lab.profile.names import UniqueNames, name_problem, swept_name


@dataclass(frozen=True)
class ArmEntry:
    """One [[arms]] table, checked; each axis holds its values (one unless swept)."""

    index: int
    name: str
    backend: str
    model: str | None
    drafter: str | None
    n_max: tuple[int | None, ...]
    options: dict[str, list[Any]]
    drafter_options: dict[str, list[Any]]
    baseline: str | None
    stack: str
    acceptance: tuple[SetAcceptance | None, ...] = (None,)
    draft_policy: str = FIXED
    deadlines: Deadlines = Deadlines()


@dataclass(frozen=True)
class ArmDraft(Arm):
    """One arm after expansion, before its baseline is known: ``baseline``
    is the arm it names, if any, and ``is_baseline`` is not decided yet."""

    index: int = -1  # the [[arms]] entry it came from


def _axes(entry: ArmEntry) -> list[tuple[str, str, Sequence[Any]]]:
    axes: list[tuple[str, str, Sequence[Any]]] = [("n_max", "n_max", entry.n_max), ("acceptance", "acceptance", entry.acceptance)]
    axes += [("options", k, v) for k, v in entry.options.items()]
    axes += [("drafter_options", k, v) for k, v in entry.drafter_options.items()]
    return axes


def _axis_key(entry: ArmEntry, table: str, k: str) -> KeyPath:
    if table in ("n_max", "acceptance"):
        return ["arms", entry.index, table]
    return ["arms", entry.index, table, k]


def expand(src: Source, entries: Sequence[ArmEntry]) -> list[ArmDraft]:
    total = 0
    for e in entries:
        axes = _axes(e)
        n = math.prod(len(v) for _, _, v in axes)
        total += n
        if total > MAX_ARMS:
            swept = [(t, k, v) for t, k, v in axes if len(v) > 1]
            key: KeyPath = _axis_key(e, swept[0][0], swept[0][1]) if swept else ["arms", e.index]
            shape = " x ".join(str(len(v)) for _, _, v in swept)
            what = "this entry" if not swept else f"this entry sweeps {n:,} values" if len(swept) == 1 else f"this entry sweeps {shape} = {n:,} arms"
            raise src.error(
                key, f"{what}, {total:,} arms so far; a profile may have at most {MAX_ARMS}: sweep fewer values or split the profile"
            )

    out: list[ArmDraft] = []
    names = UniqueNames()
    for e in entries:
        axes = _axes(e)
        swept_axes = [(t, k) for t, k, v in axes if len(v) > 1]
        for combo in itertools.product(*[v for _, _, v in axes]):
            values = {(t, k): val for (t, k, _), val in zip(axes, combo)}
            # a swept setting is saved (and names the arm) by its label
            sweep = {k: _saved(values[(t, k)]) for t, k in swept_axes}
            # an arm per prompt (acceptance set per prompt) is named by its prompt
            setting = values.get(("acceptance", "acceptance"))
            for_prompt = setting.prompt if isinstance(setting, SetAcceptance) else None
            named_by = {k: v for k, v in sweep.items() if not (for_prompt and k == "acceptance")}
            name = swept_name(e.name, named_by) + (f"-{for_prompt}" if for_prompt else "")
            name_key: KeyPath = ["arms", e.index, "name"]
            problem = name_problem(name)
            if problem:
                raise src.error(name_key, f"the sweep makes arm name {shown(name)}: {problem}")
            earlier = names.clash(name)
            if earlier is not None:
                how = "duplicate arm name" if earlier == name else f"arm name differs from {shown(earlier)} only by case:"
                made = "" if name == e.name else " (made by the sweep)"
                raise src.error(name_key, f"{how} {shown(name)}{made}")
            out.append(
                ArmDraft(
                    index=e.index, name=name, backend=e.backend, model=e.model, drafter=e.drafter,
                    n_max=values[("n_max", "n_max")],
                    options={k: values[("options", k)] for k in e.options},
                    drafter_options={k: values[("drafter_options", k)] for k in e.drafter_options},
                    baseline=e.baseline, is_baseline=False, stack=e.stack, group=e.name, sweep=sweep,
                    acceptance=values[("acceptance", "acceptance")], draft_policy=e.draft_policy,
                    deadlines=e.deadlines,
                )
            )
    return out


def _saved(value: Any) -> Any:
    return value.label() if isinstance(value, SetAcceptance) else value
