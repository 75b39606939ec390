"""Statistics over rounds: spread, speedups paired by prompt and round, a
cell's one figure (the median of its paired speedups) with an interval only
where there are pairs enough for one (:data:`MIN_T_PAIRS`: a t-interval on
the paired log-ratios), a seeded bootstrap for pooled pairs, and whether a
result can be called."""

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
DISAGREE = "pairs disagree"
TOO_FEW = "too few pairs to call"

# A cell's interval needs this many paired rounds: from two, a t-interval is
# the two values stretched by t(1) = 12.7, and a bootstrap their range.
MIN_T_PAIRS = 3
# A pooled bootstrap interval (categories) needs this many pairs: fewer
# resample to little more than the pairs' own range.
MIN_BOOTSTRAP_PAIRS = 5
# Rounds beyond which "more rounds" is no advice: the noise, not the count, decides.
MAX_SETTLE_ROUNDS = 20

# Student's t, two-sided 95 %, by degrees of freedom (1 to 30).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)
_Z975 = 1.959964


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


def t975(df: int) -> float:
    """Student's t quantile for a two-sided 95 % interval with ``df``
    degrees of freedom (past 30: the normal quantile's expansion in 1/df)."""
    if df < 1:
        raise ValueError(f"no t quantile for {df} degrees of freedom")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)


def t_interval(ratios: Sequence[float]) -> Interval | None:
    """The 95 % t-interval of the paired log-ratios' mean, as ratios
    (exp(mean ± t·s/√n): an interval for the geometric mean), or None from
    fewer than :data:`MIN_T_PAIRS` pairs."""
    if len(ratios) < MIN_T_PAIRS or any(x <= 0 for x in ratios):
        return None
    logs = [math.log(x) for x in ratios]
    mean = statistics.fmean(logs)
    half = t975(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return Interval(math.exp(mean), math.exp(mean - half), math.exp(mean + half), len(logs))


def rounds_to_settle(ratios: Sequence[float], band: float = NEUTRAL_BAND) -> int | None:
    """Paired rounds in all that would put the t-interval clear of the
    neutral band if further rounds spread as these did; None when no count
    up to :data:`MAX_SETTLE_ROUNDS` would (a cell at break-even within its
    noise), or when the pairs cannot say (fewer than two, or no spread)."""
    if len(ratios) < 2 or any(x <= 0 for x in ratios):
        return None
    logs = [math.log(x) for x in ratios]
    sd = statistics.stdev(logs)
    room = abs(statistics.fmean(logs)) - math.log(1 + band)
    if sd == 0 or room <= 0:
        return None
    for n in range(max(len(logs) + 1, MIN_T_PAIRS), MAX_SETTLE_ROUNDS + 1):
        if t975(n - 1) * sd / math.sqrt(n) < room:
            return n
    return None


@dataclass(frozen=True)
class PairedSpeedup:
    """A cell's speedup over its paired rounds: the values in round order,
    their median (the cell's one figure in every section), and a t-interval
    from :data:`MIN_T_PAIRS` pairs up."""

    values: tuple[float, ...]
    median: float
    interval: Interval | None
    call: str

    @property
    def n(self) -> int:
        return len(self.values)


def paired_speedup(ratios: Sequence[float], band: float = NEUTRAL_BAND) -> PairedSpeedup | None:
    """The cell's figure from its paired speedups (round order), None
    without any. Its call: from an interval where there is one, else from
    the pairs themselves (every pair past the band on one side, every one
    inside it, or pairs on both sides of 1.0: they disagree)."""
    if not ratios:
        return None
    values = tuple(float(x) for x in ratios)
    iv = t_interval(values)
    call = _interval_call(iv, band) if iv is not None else _pairs_call(values, band)
    return PairedSpeedup(values, statistics.median(values), iv, call)


def _pairs_call(values: Sequence[float], band: float) -> str:
    """What pairs too few for an interval say by themselves."""
    if len(values) == 1:
        return ONE_PAIR
    if all(x >= 1 + band for x in values):
        return FASTER
    if all(x <= 1 - band for x in values):
        return SLOWER
    if all(1 - band < x < 1 + band for x in values):
        return EVEN
    if min(values) < 1.0 <= max(values):
        return DISAGREE
    return TOO_FEW


def _interval_call(iv: Interval, band: float) -> str:
    if iv.low >= 1 + band:
        return FASTER
    if iv.high <= 1 - band:
        return SLOWER
    if iv.low > 1 - band and iv.high < 1 + band:
        return EVEN
    return TOO_WIDE


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
    """Pooled pairs (a category's, over prompts and rounds): their geometric
    mean with a percentile bootstrap interval from :data:`MIN_BOOTSTRAP_PAIRS`
    pairs up, faster or slower when the whole interval is past the neutral
    band, even when it sits inside it, else too wide to call. Fewer pairs:
    the estimate alone (``interval.n`` says how many), called as a cell's
    pairs are (:func:`paired_speedup`)."""
    if not ratios:
        return SpeedupCall(None, NO_PAIRS)
    iv = bootstrap_geomean(ratios, seed=seed)
    if iv.n < MIN_BOOTSTRAP_PAIRS:
        return SpeedupCall(Interval(iv.estimate, iv.estimate, iv.estimate, iv.n), _pairs_call(ratios, band))
    return SpeedupCall(iv, _interval_call(iv, band))
