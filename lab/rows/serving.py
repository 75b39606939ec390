"""Figures of server arms beyond one stream: :func:`row_fields` lifts a
backend's ``engine_report["concurrency"]`` into the row's keys with the
aggregate speedup against the baseline at the same concurrency, and the
attached servers' figures beside them."""

from __future__ import annotations

import statistics
from typing import Any, Mapping

from lab.base.row import SERVING_KEYS


def row_fields(engine_report: Mapping[str, Any] | None, baseline: Mapping[str, Any] | None) -> dict[str, Any]:
    """The row's concurrency keys from a cell's engine report."""
    report = engine_report or {}
    out: dict[str, Any] = dict.fromkeys(SERVING_KEYS)
    out["server_url"] = report.get("attached")
    conc = report.get("concurrency")
    if not isinstance(conc, Mapping):
        return out
    per_stream = [float(x) for x in conc.get("stream_tok_per_s") or [] if isinstance(x, (int, float))]
    agg = conc.get("aggregate_tok_per_s")
    base_agg = baseline.get("aggregate_tok_per_s") if baseline else None
    out.update(
        concurrency=conc.get("concurrency"),
        aggregate_tok_per_s=agg,
        aggregate_speedup=agg / base_agg if isinstance(agg, (int, float)) and base_agg else None,
        stream_tok_per_s_p50=statistics.median(per_stream) if per_stream else None,
        stream_tok_per_s_min=min(per_stream) if per_stream else None,
        concurrent_ttft_p50_s=conc.get("ttft_p50_s"),
        concurrent_ttft_p95_s=conc.get("ttft_p95_s"),
        concurrent_itl_p50_s=conc.get("itl_p50_s"),
        concurrent_itl_p95_s=conc.get("itl_p95_s"),
        concurrent_itl_p99_s=conc.get("itl_p99_s"),
        aggregate_acceptance_rate=conc.get("acceptance_rate_all"),
    )
    return out


