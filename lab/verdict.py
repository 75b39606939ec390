"""The one-line verdict of a result row.

A speculative step pays when the tokens it lands (mean accepted length L)
exceed what it costs in baseline-token equivalents (C = step seconds /
baseline seconds per token). It can never pay when C >= the most a step can
land (max yield = n_max + 1): the write-ups' "structural dead end".
"""

from __future__ import annotations

from typing import Any, Mapping

# Within this band a speedup is too close to 1 to call either way.
NEUTRAL_BAND = 0.02


def verdict(row: Mapping[str, Any]) -> str:
    status = row.get("status")
    if status != "ok":
        detail = str(row.get("detail") or "").strip().splitlines()
        return f"failed: {status}" + (f" ({detail[0][:80]})" if detail else "")
    if row.get("is_baseline"):
        return "baseline"
    if not row.get("steps"):
        return "no speculative steps: the drafter proposed nothing"
    speedup = row.get("speedup")
    cost = row.get("step_cost_tokens")
    length = row.get("mean_accepted_len")
    max_yield = row.get("max_yield")
    if speedup is None or cost is None:
        return "no baseline to compare against"
    if max_yield and cost >= max_yield:
        return (
            f"structural loss: a step costs {cost:.2f} baseline tokens but can land at most "
            f"{max_yield}; no acceptance rate can pay"
        )
    if speedup >= 1 + NEUTRAL_BAND:
        return f"pays: {speedup:.2f}x, landing {length:.2f} tokens per step at a cost of {cost:.2f}"
    if speedup > 1 - NEUTRAL_BAND:
        return f"break-even: {speedup:.2f}x, landing {length:.2f} tokens per step at a cost of {cost:.2f}"
    return (
        f"loses at this acceptance: {speedup:.2f}x, lands {length:.2f} tokens per step, "
        f"needs more than {cost:.2f} to break even"
    )
