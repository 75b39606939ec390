"""How closely an arm with set acceptance kept its drafts at the rates given:
per position the measured conditional rate beside the set one, in binomial
standard errors, so an engine that ignores the setting shows up here first."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from lab.analysis.measured_acceptance import by_arm
from lab.base.set_acceptance import conditional

# standard errors beyond which a position is off its set rate (1 in 1,500 by chance)
Z_LIMIT = 3.2


@dataclass(frozen=True)
class PositionCheck:
    position: int  # 1-based
    set_rate: float  # conditional: kept given the positions before were
    reached: int
    accepted: int

    @property
    def measured(self) -> float | None:
        return self.accepted / self.reached if self.reached else None

    @property
    def z(self) -> float | None:
        """Standard errors between measured and set (None: nothing measured,
        or a rate of 0 or 1 that only an exact count can meet)."""
        if not self.reached:
            return None
        p = self.set_rate
        if p <= 0.0 or p >= 1.0:
            return 0.0 if self.accepted == round(p * self.reached) else math.inf
        se = math.sqrt(p * (1 - p) / self.reached)
        return (self.accepted / self.reached - p) / se


@dataclass(frozen=True)
class ArmCheck:
    arm: str
    setting: Mapping[str, Any]
    positions: tuple[PositionCheck, ...]

    @property
    def worst_z(self) -> float | None:
        zs = [abs(p.z) for p in self.positions if p.z is not None]
        return max(zs) if zs else None

    @property
    def below(self) -> bool:
        """Every position past the noise is below its set rate: the engine refused
        drafts the draws would have kept (llama-server never keeps a drafted EOG token)."""
        far = [p.z for p in self.positions if p.z is not None and abs(p.z) > Z_LIMIT]
        return bool(far) and all(z < 0 for z in far)

    @property
    def honoured(self) -> bool | None:
        """Every measured position within noise; None with nothing measured."""
        worst = self.worst_z
        return None if worst is None else worst <= Z_LIMIT


def checks(results: Sequence[Mapping[str, Any]], steps: Sequence[Mapping[str, Any]] | None) -> list[ArmCheck]:
    """One check per arm whose rows say acceptance was set, in run order."""
    settings: dict[str, Mapping[str, Any]] = {}
    for r in results:
        setting = r.get("set_acceptance")
        if isinstance(setting, Mapping) and setting.get("rates") and r["arm"] not in settings:
            settings[r["arm"]] = setting
    if not settings:
        return []
    measured = by_arm(steps or [])
    out = []
    for arm, setting in settings.items():
        try:
            chances = conditional([float(x) for x in setting["rates"]])
        except (TypeError, ValueError):
            continue
        pos = measured.get(arm)
        rows = []
        for i, chance in enumerate(chances):
            reached = pos.reached[i] if pos is not None and i < len(pos.reached) else 0
            accepted = pos.accepted[i] if pos is not None and i < len(pos.accepted) else 0
            rows.append(PositionCheck(i + 1, chance, reached, accepted))
        out.append(ArmCheck(arm, setting, tuple(rows)))
    return out
