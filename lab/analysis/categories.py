"""Figures per speculative arm and prompt category: pooled acceptance and
mean accepted length, speedup as the geometric mean of paired ratios with a
bootstrap interval from :data:`FEW_PAIRS` pairs up; ``all`` pools every category."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from lab.analysis import stats

ALL = "all"
# Pairs below which a percentile bootstrap mostly restates the pairs' range: no interval then.
FEW_PAIRS = stats.MIN_BOOTSTRAP_PAIRS
UNCATEGORIZED = "uncategorized"


@dataclass(frozen=True)
class CategoryRow:
    """One arm's figures over one category (or over ``all``)."""

    arm: str
    category: str
    prompts: int  # distinct prompts with at least one ok row
    drafted: int
    accepted: int
    acceptance_rate: float | None
    mean_accepted_len: float | None
    speedup: float | None  # geometric mean of the paired ratios
    speedup_low: float | None
    speedup_high: float | None
    pairs: int
    call: str

    def to_json(self) -> dict[str, Any]:
        return {
            "arm": self.arm, "category": self.category, "prompts": self.prompts, "drafted": self.drafted,
            "accepted": self.accepted, "acceptance_rate": self.acceptance_rate,
            "mean_accepted_len": self.mean_accepted_len, "speedup": self.speedup,
            "speedup_low": self.speedup_low, "speedup_high": self.speedup_high, "pairs": self.pairs,
            "call": self.call,
        }


def has_categories(results: Sequence[Mapping[str, Any]]) -> bool:
    return any(r.get("category") for r in results)


def _category(row: Mapping[str, Any]) -> str:
    return str(row.get("category") or UNCATEGORIZED)


def _landed(row: Mapping[str, Any]) -> float | None:
    """Tokens the row's steps landed: generated minus those the target made
    outside steps when the row says so, else mean length x steps."""
    n, plain = row.get("n_tokens"), row.get("plain_tokens")
    if n is not None and plain is not None:
        return float(n - plain)
    mal, steps = row.get("mean_accepted_len"), row.get("steps")
    if mal is not None and steps:
        return float(mal) * int(steps)
    return None


def _row(arm: str, category: str, rows: Sequence[Mapping[str, Any]], results: Sequence[Mapping[str, Any]],
         seed: int) -> CategoryRow:
    ok = [r for r in rows if r.get("status") == "ok"]
    drafted = sum(int(r.get("drafted") or 0) for r in ok)
    accepted = sum(int(r.get("accepted") or 0) for r in ok)
    steps = 0
    landed = 0.0
    for r in ok:
        got = _landed(r)
        if got is not None and r.get("steps"):
            steps += int(r["steps"])
            landed += got
    prompts = sorted({str(r["prompt"]) for r in ok})
    ratios = [x for p in prompts for _, _, x in stats.paired_ratios(results, arm, p)]
    called = stats.call_speedup(ratios, seed=seed)
    iv = called.interval
    many = iv is not None and iv.n >= FEW_PAIRS
    return CategoryRow(
        arm=arm, category=category, prompts=len(prompts), drafted=drafted, accepted=accepted,
        acceptance_rate=accepted / drafted if drafted else None,
        mean_accepted_len=landed / steps if steps else None,
        speedup=iv.estimate if iv is not None else None,
        speedup_low=iv.low if many and iv is not None else None,
        speedup_high=iv.high if many and iv is not None else None,
        pairs=len(ratios), call=called.call,
    )


def category_table(results: Sequence[Mapping[str, Any]], seed: int = 0) -> list[CategoryRow]:
    """Every speculative arm x category (in order of first appearance), each
    arm followed by its ``all`` row when it has more than one category. Baseline arms have no acceptance and are
    the denominators of the speedups, so they get no rows. Warmup never counts."""
    recorded = [r for r in results if int(r.get("round", 1)) >= 1 and not r.get("is_baseline")]
    arms = list(dict.fromkeys(str(r["arm"]) for r in recorded))
    categories = list(dict.fromkeys(_category(r) for r in results if int(r.get("round", 1)) >= 1))
    out: list[CategoryRow] = []
    for arm in arms:
        mine = [r for r in recorded if r["arm"] == arm]
        shown = 0
        for category in categories:
            rows = [r for r in mine if _category(r) == category]
            if rows:
                out.append(_row(arm, category, rows, results, seed))
                shown += 1
        if shown > 1:
            out.append(_row(arm, ALL, mine, results, seed))
    return out


