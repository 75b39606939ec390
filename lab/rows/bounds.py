"""What a plugin hands the lab to keep (a row's engine report, an arm's
report) bounded by construction: past its byte budget, the largest entries
are left out, each named, so one plugin or server cannot make results.json
too large to read back."""

from __future__ import annotations

import json
from typing import Any, Mapping

# an engine report is a few KB (a long vLLM run's a few hundred); an arm's likewise
MAX_REPORT_BYTES = 1 << 20
MAX_NAMED = 20


def _size(value: Any) -> int:
    try:
        return len(json.dumps(value, default=str))
    except (TypeError, ValueError, RecursionError):
        return MAX_REPORT_BYTES + 1


def bounded_report(report: Mapping[str, Any] | None, budget: int = MAX_REPORT_BYTES) -> dict[str, Any]:
    """``report`` as it is when its JSON fits ``budget`` bytes; else without
    its largest entries until it does, their names under
    ``report_cut`` (with their sizes)."""
    out = dict(report or {})
    if _size(out) <= budget:
        return out
    sizes = sorted(((_size(v), str(k)) for k, v in out.items()), reverse=True)
    total = sum(s for s, _ in sizes)
    cut: list[str] = []
    for size, key in sizes:
        if total <= budget // 2:
            break
        out.pop(key, None)
        total -= size
        if len(cut) < MAX_NAMED:
            cut.append(f"{key[:80]} ({size:,} bytes)")
    out["report_cut"] = f"left out past {budget:,} bytes: " + ", ".join(cut)
    return out
