"""The shape of latency a chat user sees: time to first token, then the
gaps between tokens, each token its own arrival (a burst of accepted drafts
arrives with gaps of zero), so a speculative arm can have a lower median gap
than its baseline and a higher p99. Arrivals are (time, tokens) pairs on the
events' clock, pauses already taken out."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from lab.base.row import LATENCY_KEYS


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100) of ``values``, linear between the two
    nearest ranks (the usual definition, numpy's default); None when empty."""
    if not values:
        return None
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is outside 0-100")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def gaps(arrivals: Iterable[tuple[float, int]]) -> list[float]:
    """Inter-token gaps: an arrival of n tokens at t gives t - (previous
    arrival) for its first token and 0 for each of the other n - 1. The
    first token has no gap (it is the time to first token)."""
    out: list[float] = []
    last: float | None = None
    for t, n in arrivals:
        if n <= 0:
            continue
        if last is not None:
            out.append(max(0.0, t - last))
        # the rest of a burst (or of the first arrival, whose own wait is
        # the TTFT) came with the token before them
        out.extend([0.0] * (n - 1))
        last = t
    return out


@dataclass(frozen=True)
class LatencyShape:
    ttft_s: float | None
    itl_p50_s: float | None
    itl_p95_s: float | None
    itl_p99_s: float | None
    tokens: int
    # share of tokens that arrived with no gap (inside a burst)
    burst_share: float | None

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in LATENCY_KEYS}


def shape(start: float, arrivals: Sequence[tuple[float, int]]) -> LatencyShape:
    """Latency of one cell that started (the request went in) at ``start``
    and whose tokens arrived as ``arrivals``."""
    arrivals = [(t, n) for t, n in arrivals if n > 0]
    if not arrivals:
        return LatencyShape(None, None, None, None, 0, None)
    g = gaps(arrivals)
    zero = sum(1 for x in g if x == 0.0)
    return LatencyShape(
        ttft_s=max(0.0, arrivals[0][0] - start),
        itl_p50_s=percentile(g, 50), itl_p95_s=percentile(g, 95), itl_p99_s=percentile(g, 99),
        tokens=sum(n for _, n in arrivals),
        burst_share=zero / len(g) if g else None,
    )


class ArrivalClock:
    """Collects one cell's token arrivals as they are emitted. Held time
    (a pause between steps) is taken out of every later arrival, as the
    cell's generation clock leaves it out."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.held_s = 0.0
        self.arrivals: list[tuple[float, int]] = []

    def token(self, t: float, n: int) -> None:
        self.arrivals.append((t - self.held_s, n))

    def held(self, seconds: float) -> None:
        self.held_s += seconds

    def shape(self) -> LatencyShape:
        return shape(self.start, self.arrivals)
