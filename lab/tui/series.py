"""What the plots draw, per arm: kept on the UI thread, fed by live
messages or rebuilt from a saved run's steps and results."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from lab.base import metrics
from lab.base.events import StepEvent

if TYPE_CHECKING:
    from lab.base.profile import Arm


@dataclass
class ArmSeries:
    arm: str
    max_yield: int | None = None
    landed: list[int] = field(default_factory=list)  # tokens landed per step
    step_s: list[float] = field(default_factory=list)
    rate: list[tuple[float, float]] = field(default_factory=list)  # (seconds, tok/s)
    _cell: tuple[str, int] | None = None
    _offset: float = 0.0
    _last_x: float = 0.0

    @classmethod
    def of(cls, arm: Arm) -> ArmSeries:
        return cls(arm.name, None if arm.is_baseline else metrics.max_yield(arm.n_max))

    def add_steps(self, steps: Sequence[StepEvent]) -> None:
        for s in steps:
            self.landed.append(s.landed)
            self.step_s.append(s.step_s)

    def add_rate(self, cell: tuple[str, int], point: tuple[float, float]) -> None:
        """A (seconds since the cell's first token, tok/s) point; cells of
        an arm follow one another on one time axis."""
        if cell != self._cell:
            self._cell = cell
            self._offset = self._last_x
        x = self._offset + point[0]
        self._last_x = x
        self.rate.append((x, point[1]))

    def histogram(self) -> list[tuple[int, int]]:
        counts = Counter(self.landed)
        top = max([*counts, self.max_yield or 0, 1])
        return [(n, counts.get(n, 0)) for n in range(1, top + 1)]


def series_from_saved(arms: Sequence[Mapping[str, Any]], results: Sequence[Mapping[str, Any]],
                      steps: Sequence[Mapping[str, Any]]) -> dict[str, ArmSeries]:
    """Rebuild the plots of a saved run. Steps give accepted lengths, step
    costs and a tok/s curve (tokens landed over step time); arms without
    steps (baselines) get one tok/s point per finished round."""
    out: dict[str, ArmSeries] = {}
    for a in arms:
        out[a["name"]] = ArmSeries(a["name"], None if a.get("is_baseline") else metrics.max_yield(a.get("n_max")))
    by_cell: dict[tuple[str, str, int], list[Mapping[str, Any]]] = {}
    for s in steps:
        by_cell.setdefault((s["arm"], s["prompt"], s["round"]), []).append(s)
    for (arm, prompt, rnd), cell_steps in by_cell.items():
        series = out.setdefault(arm, ArmSeries(arm))
        t = 0.0
        landed = 0
        for s in sorted(cell_steps, key=lambda s: s["index"]):
            series.landed.append(int(s["landed"]))
            series.step_s.append(float(s["step_s"]))
            t += float(s["step_s"])
            landed += int(s["landed"])
            series.add_rate((prompt, rnd), (t, metrics.tok_per_s(landed, t) or 0.0))
    stepped = {k[0] for k in by_cell}
    for r in results:
        known = out.get(r["arm"])
        if known is None or r["arm"] in stepped:
            continue
        if r.get("status") == "ok" and r.get("tok_per_s") and r.get("gen_s"):
            known.add_rate((r["prompt"], r["round"]), (float(r["gen_s"]), float(r["tok_per_s"])))
    return out
