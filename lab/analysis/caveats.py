"""Why a row's prediction may miss by more than :data:`HOLD`, known apart
from its error: a short tag (beside the prediction) and a sentence each."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from lab.analysis import predict
from lab.base.probe import Probe

HOLD = 0.10


@dataclass(frozen=True)
class Caveat:
    tag: str
    why: str


def for_row(results: Sequence[Mapping[str, Any]], steps: Sequence[Mapping[str, Any]], arm: str, prompt: str,
            probe: Probe, matches: bool = True) -> list[Caveat]:
    """The caveats of one speculative arm x prompt priced by ``probe``."""
    rows = [r for r in results if r.get("arm") == arm and r.get("prompt") == prompt and _measured(r)]
    if not rows:
        return []
    base_arm = rows[0].get("baseline_arm")
    base = [r for r in results if base_arm and r.get("arm") == base_arm and r.get("prompt") == prompt and _measured(r)]
    out = []
    if not matches:
        out.append(Caveat("other stack", "its probe measured another stack than the arm runs"))
    if probe.origin.get("busy"):
        out.append(Caveat("probe busy", f"its probe was timed beside other work ({probe.origin['busy']})"))
    busy = sum(1 for r in rows if r.get("contended"))
    if busy:
        out.append(Caveat("busy", f"{busy} of its {len(rows)} cells (or their baseline's) ran beside other work, "
                                  "which the probe's T(w) does not price"))
    spread = _round_spread(results, arm, prompt)
    if spread is not None and spread > HOLD:
        out.append(Caveat("rounds", f"its rounds' speedups lie up to {math.ceil(round(spread * 100, 6))}% from their median: the "
                                    f"measured figure itself moves by more than ±{HOLD * 100:.0f}%"))
    depth = predict.depth_disagreement(rows, probe)
    if depth:
        out.append(Caveat("depth", depth))
    clocks = predict.t1_disagreement(base, probe) if base and not depth else None
    if clocks:
        out.append(Caveat("clocks", clocks))
    drift = predict.draft_drift(steps, arm)
    if drift:
        out.append(Caveat("draft drift", drift))
    return out


def _measured(row: Mapping[str, Any]) -> bool:
    return row.get("status") == "ok" and int(row.get("round", 1)) >= 1


def _round_spread(results: Sequence[Mapping[str, Any]], arm: str, prompt: str) -> float | None:
    """A round's paired speedup's largest distance from their median; None under two."""
    from lab.analysis.stats import paired_ratios

    xs = [x for _, _, x in paired_ratios(results, arm, prompt)]
    if len(xs) < 2:
        return None
    mid = statistics.median(xs)
    return max(abs(x / mid - 1) for x in xs) if mid > 0 else None


def holds(predicted: float | None, measured: float | None) -> bool | None:
    """Whether a prediction came within :data:`HOLD` of the measured speedup (None: one missing)."""
    if predicted is None or not measured:
        return None
    return abs(predicted / measured - 1) <= HOLD + 1e-9
