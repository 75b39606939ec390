"""The drift guard: a monotone trend over rounds in tok/s or drafted tokens,
beyond the rounds' noise, says the engine carried state between requests
whatever the profile asked. Plain data; :mod:`lab.render.report` words it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from lab.analysis.stats import SPREAD_LIMIT

# the least first-to-last change called a trend (quiet machines move a few percent)
NOISE_FLOOR = 0.05
# a speculative arm's tok/s noise, in multiples of its baseline's spread over the same rounds
BASELINE_NOISE_FACTOR = 2.0


@dataclass(frozen=True)
class Trend:
    """One metric of one arm x prompt over its ok rounds: ``change`` is last
    over first less 1, ``noise`` the change it had to exceed."""

    metric: str  # "tok/s" or "drafted"
    values: tuple[float, ...]
    change: float
    noise: float

    @property
    def faster(self) -> bool:
        return self.change > 0


@dataclass(frozen=True)
class Drift:
    """An arm x prompt whose rounds are not repeats."""

    arm: str
    prompt: str
    warm: bool
    trends: tuple[Trend, ...]


def series(rows: Sequence[Mapping[str, Any]], key: str) -> tuple[float, ...]:
    """``key`` of the ok measured rounds, in round order (None left out)."""
    ok = sorted((r for r in rows if r["status"] == "ok" and int(r.get("round", 1)) >= 1), key=lambda r: int(r["round"]))
    return tuple(float(r[key]) for r in ok if r.get(key) is not None)


def monotone(values: Sequence[float], strict: bool = True) -> bool:
    """Strictly rising or strictly falling; with ``strict`` off, never
    falling or never rising (a climb that then holds: 16, 35, 35)."""
    steps = [b - a for a, b in zip(values, values[1:])]
    if strict:
        return bool(steps) and (all(d > 0 for d in steps) or all(d < 0 for d in steps))
    return any(steps) and (all(d >= 0 for d in steps) or all(d <= 0 for d in steps))


def trend(metric: str, values: Sequence[float], noise: float, min_rounds: int, strict: bool = True) -> Trend | None:
    """The trend of ``values`` when it is monotone over at least
    ``min_rounds`` rounds and its change beyond ``noise``; else None."""
    if len(values) < min_rounds or not values[0] or not monotone(values, strict):
        return None
    change = values[-1] / values[0] - 1.0
    return Trend(metric, tuple(values), change, noise) if abs(change) > noise else None


def round_drift(results: Sequence[Mapping[str, Any]]) -> list[Drift]:
    """Every arm x prompt whose tok/s (three rounds or more) or drafted tokens
    (two or more; not at a set acceptance) trend beyond the noise."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in results:
        if int(r.get("round", 1)) >= 1:
            groups.setdefault((r["arm"], r["prompt"]), []).append(r)
    out = []
    for (arm, prompt), rows in groups.items():
        first = rows[0]
        base_rows = groups.get((first.get("baseline_arm") or "", prompt), [])
        base_tps = series(base_rows, "tok_per_s")
        if first.get("is_baseline") or not base_tps:
            tps_noise = SPREAD_LIMIT
        else:
            base_spread = (max(base_tps) - min(base_tps)) / min(base_tps) if min(base_tps) else 0.0
            tps_noise = max(NOISE_FLOOR, BASELINE_NOISE_FACTOR * base_spread)
        # greedy drafting repeats exactly: a climb that then holds is a trend too; a set
        # acceptance draws anew each round, so its drafted counts differ by design
        drafted = None if any(r.get("set_acceptance") for r in rows) else \
            trend("drafted", series(rows, "drafted"), NOISE_FLOOR, 2, strict=False)
        found = [t for t in (trend("tok/s", series(rows, "tok_per_s"), tps_noise, 3), drafted) if t is not None]
        if found:
            out.append(Drift(arm, prompt, any(bool(r.get("warm")) for r in rows), tuple(found)))
    return out


def warm(results: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the run's rounds shared engine state ([run] warm_rounds)."""
    return any(bool(r.get("warm")) for r in results)
