"""The one-line verdict of a result row.

A speculative step pays when the tokens it lands (mean accepted length L)
exceed what it costs in baseline-token equivalents (C = step seconds /
baseline seconds per token). It can never pay when C >= the most a step can
land (max yield = n_max + 1): the write-ups' "structural dead end". The
arithmetic lives in :mod:`lab.analysis.breakeven`; verdict lines start with
one of: pays, break-even, loses, structural loss, failed, baseline.
"""

from __future__ import annotations

from typing import Any, Mapping

from lab.analysis.breakeven import NEUTRAL_BAND, classify

__all__ = ["NEUTRAL_BAND", "verdict", "verdict_kind"]


def verdict(row: Mapping[str, Any]) -> str:
    return classify(row).line


def verdict_kind(row: Mapping[str, Any]) -> str:
    """The verdict's kind alone (pays, break-even, loses, structural loss,
    failed, baseline, no steps, no baseline), for colouring and diffs."""
    return classify(row).kind
