"""N streams of one cell at once (``concurrency = N``), each kept as it
arrived (:class:`StreamRecord`), and what they add up to
(:func:`stream_summary`: per-stream and aggregate tok/s, latency, drafts);
at most :data:`MAX_CONCURRENCY` streams within ``concurrency_timeout_s``."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any, Sequence

from lab.api import Option

MAX_CONCURRENCY = 64

CONCURRENCY_OPTIONS: tuple[Option, ...] = (
    Option("concurrency", int, 1, min=1, max=MAX_CONCURRENCY, help=
           "streams of the cell's prompt sent at once (a list sweeps: [1, 2, 4]); the server gets --parallel "
           "of at least this many slots"),
    Option("concurrency_timeout_s", float, 600.0, min=1, max=86400, help=
           "seconds all streams of one cell may take before the cell fails"),
)


def end_side_streams(stop: threading.Event, start: threading.Barrier, threads: Sequence[threading.Thread]) -> None:
    """Tell a cell's side streams to stop (waking any still at the start
    barrier) and wait a bounded time for each: on every way out of a cell."""
    stop.set()
    start.abort()
    for t in threads:
        t.join(timeout=5.0)


@dataclass
class StreamRecord:
    """One stream as it arrived: sent time, each token-bearing chunk
    (arrival, tokens), the server's final figures, its error if any."""

    t_sent: float = 0.0
    arrivals: list[tuple[float, int]] = field(default_factory=list)
    final: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def n_tokens(self) -> int:
        return sum(n for _, n in self.arrivals)

    @property
    def ttft_s(self) -> float | None:
        return self.arrivals[0][0] - self.t_sent if self.arrivals else None

    def gaps(self) -> list[float]:
        """Seconds between consecutive tokens on arrival: a chunk's first
        token waited since the previous chunk, the rest of it came along."""
        out: list[float] = []
        for (t0, _), (t1, n) in zip(self.arrivals, self.arrivals[1:]):
            out.append(t1 - t0)
            out.extend([0.0] * (n - 1))
        return out

    @property
    def tok_per_s(self) -> float | None:
        """Tokens after the first over the seconds after the first, on arrival."""
        if len(self.arrivals) < 2:
            return None
        span = self.arrivals[-1][0] - self.arrivals[0][0]
        return (self.n_tokens - self.arrivals[0][1]) / span if span > 0 else None

    def counts(self) -> tuple[int, int]:
        timings = self.final.get("timings") or {}
        return int(timings.get("draft_n", 0)), int(timings.get("draft_n_accepted", 0))


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks; None for no values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def stream_summary(records: Sequence[StreamRecord]) -> dict[str, Any]:
    """What N streams of one cell add up to (the row's concurrency keys)."""
    ok = [r for r in records if r.error is None]
    start = min((r.t_sent for r in records), default=0.0)
    end = max((r.arrivals[-1][0] for r in ok if r.arrivals), default=start)
    total = sum(r.n_tokens for r in ok)
    gaps = [g for r in ok for g in r.gaps()]
    ttfts = [t for r in ok if (t := r.ttft_s) is not None]
    drafted = sum(r.counts()[0] for r in ok)
    accepted = sum(r.counts()[1] for r in ok)
    return {
        "concurrency": len(records),
        "streams_ok": len(ok),
        "stream_errors": [r.error for r in records if r.error is not None],
        "tokens_total": total,
        "wall_s": end - start,
        # every stream's tokens over the seconds from sending to the last token
        "aggregate_tok_per_s": total / (end - start) if end > start else None,
        "stream_tok_per_s": [r.tok_per_s for r in ok],
        "ttft_p50_s": percentile(ttfts, 50),
        "ttft_p95_s": percentile(ttfts, 95),
        "itl_p50_s": percentile(gaps, 50),
        "itl_p95_s": percentile(gaps, 95),
        "itl_p99_s": percentile(gaps, 99),
        "drafted_total": drafted,
        "accepted_total": accepted,
        "acceptance_rate_all": accepted / drafted if drafted else None,
    }
