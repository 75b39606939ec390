"""Every figure the lab shows, defined once, so a figure read during a run
is the one the run saves. Not applicable -> None."""

from __future__ import annotations

import statistics
from typing import Sequence


def tok_per_s(tokens: int | None, seconds: float | None) -> float | None:
    """Generated tokens over generation-phase seconds."""
    if not tokens or seconds is None or seconds <= 0:
        return None
    return tokens / seconds


def acceptance_rate(accepted: int | None, drafted: int | None) -> float | None:
    """Accepted over drafted tokens."""
    if not drafted or accepted is None:
        return None
    return accepted / drafted


def mean_accepted_len(landed: int, steps: int | None) -> float | None:
    """Tokens landed per step (accepted + the target's own token, less when
    the token budget ran out): what a step actually added to the output."""
    if not steps:
        return None
    return landed / steps


def speedup(tok_per_s: float | None, baseline_tok_per_s: float | None) -> float | None:
    """An arm's tok/s over its own stack baseline's."""
    if not tok_per_s or not baseline_tok_per_s:
        return None
    return tok_per_s / baseline_tok_per_s


def step_cost_tokens(step_s: float | None, baseline_tok_per_s: float | None) -> float | None:
    """A step's seconds in baseline-token equivalents (step seconds over the
    baseline's seconds per token)."""
    if step_s is None or not baseline_tok_per_s:
        return None
    return step_s * baseline_tok_per_s


def max_yield(n_max: int | None) -> int | None:
    """The most one step can land: every drafted token plus the target's own."""
    return n_max + 1 if n_max else None


def mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None
