"""Statistics over rounds: spread, speedups paired by prompt and round and
averaged as logs (2x and 0.5x are even), a seeded bootstrap interval, and
whether a result can be called."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from lab.base import metrics
from lab.base.economics import NEUTRAL_BAND

# Rounds whose tok/s spread (max - min over median) exceeds this are flagged.
SPREAD_LIMIT = 0.10
BOOTSTRAP_RESAMPLES = 4000
CONFIDENCE = 0.95

FASTER = "faster"
SLOWER = "slower"
EVEN = "even"
TOO_WIDE = "too wide to call"
ONE_PAIR = "one pair, no interval"
NO_PAIRS = "no pairs"


@dataclass(frozen=True)
class Spread:
    n: int
    median: float
    min: float
    max: float

    @property
    def relative(self) -> float:
        return (self.max - self.min) / self.median if self.median else 0.0

    @property
    def too_wide(self) -> bool:
        return self.n > 1 and self.relative > SPREAD_LIMIT


def spread(values: Iterable[float | None]) -> Spread | None:
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return None
    return Spread(len(xs), statistics.median(xs), min(xs), max(xs))


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float
    n: int


def bootstrap_geomean(
    ratios: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES, confidence: float = CONFIDENCE, seed: int = 0,
) -> Interval:
    """Geometric mean of ratios with a percentile bootstrap interval."""
    if not ratios:
        raise ValueError("no ratios to bootstrap")
    logs = np.log(np.asarray(ratios, dtype=np.float64))
    estimate = float(np.exp(logs.mean()))
    if len(logs) == 1:
        return Interval(estimate, estimate, estimate, 1)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(logs), size=(resamples, len(logs)))
    means = logs[idx].mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha])
    return Interval(estimate, float(math.exp(low)), float(math.exp(high)), len(logs))


def paired_ratios(
    rows: Sequence[Mapping[str, Any]], arm: str, prompt: str | None = None,
) -> list[tuple[str, int, float]]:
    """(prompt, round, arm tok/s over its baseline's) wherever both succeeded,
    warmup left out; paired here, not from the rows' speedup."""
    ok = {(r["arm"], r["prompt"], r["round"]): r for r in rows if r.get("status") == "ok" and int(r.get("round", 1)) >= 1}
    out = []
    for (a, p, rnd), r in ok.items():
        if a != arm or (prompt is not None and p != prompt):
            continue
        base_arm = r.get("baseline_arm")
        base = ok.get((base_arm, p, rnd)) if base_arm else None
        ratio = metrics.speedup(r.get("tok_per_s"), base.get("tok_per_s")) if base is not None else None
        if ratio is None:
            continue
        out.append((p, rnd, ratio))
    out.sort(key=lambda t: (t[0], t[1]))
    return out


@dataclass(frozen=True)
class SpeedupCall:
    interval: Interval | None
    call: str

    @property
    def callable(self) -> bool:
        return self.call in (FASTER, SLOWER, EVEN)


def call_speedup(ratios: Sequence[float], band: float = NEUTRAL_BAND, seed: int = 0) -> SpeedupCall:
    """Faster or slower when the whole interval is past the neutral band,
    even when it sits inside it, else too wide to call."""
    if not ratios:
        return SpeedupCall(None, NO_PAIRS)
    iv = bootstrap_geomean(ratios, seed=seed)
    if iv.n == 1:
        return SpeedupCall(iv, ONE_PAIR)
    if iv.low >= 1 + band:
        return SpeedupCall(iv, FASTER)
    if iv.high <= 1 - band:
        return SpeedupCall(iv, SLOWER)
    if iv.low > 1 - band and iv.high < 1 + band:
        return SpeedupCall(iv, EVEN)
    return SpeedupCall(iv, TOO_WIDE)
