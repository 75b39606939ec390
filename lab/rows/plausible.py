"""Whether a cell's figures are possible before its row may say ``ok``: an
engine can report more tokens than asked, more accepted than drafted, a
generation of 1e-300 s. The first impossible figure turns any backend's row
into an error naming it; the bounds are loose, so a fast machine passes."""

from __future__ import annotations

import math
from typing import Sequence

from lab.base.events import StepEvent
from lab.base.limits import N_MAX

# no engine generates a token in under a microsecond
MIN_TOKEN_S = 1e-6


def _bad_seconds(value: float | None) -> bool:
    return value is not None and (not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0)


def impossible_figure(*, n_tokens: int | None, max_tokens: int | None, overshoot: int = 0,
                      steps: Sequence[StepEvent] = (), gen_s: float | None = None,
                      prompt_s: float | None = None, ignore_eos: bool = False) -> str | None:
    """What is impossible about a cell's figures, or None. ``overshoot``:
    tokens the engine may deliver past ``max_tokens``; with ``ignore_eos``
    no token at all is no generation."""
    if n_tokens is not None:
        if n_tokens < 0:
            return f"n_tokens = {n_tokens}"
        if n_tokens == 0 and ignore_eos and max_tokens:
            return f"no token for max_tokens = {max_tokens} with ignore_eos (the stream stopped before its first token)"
        if max_tokens is not None and n_tokens > max_tokens + overshoot:
            return f"n_tokens = {n_tokens} for max_tokens = {max_tokens}" + (f" (+{overshoot} allowed)" if overshoot else "")
    for step in steps:
        where = f"step {step.index}"
        if step.drafted < 0 or step.accepted < 0 or step.landed < 0:
            return f"{where}: drafted {step.drafted}, accepted {step.accepted}, landed {step.landed}"
        if step.accepted > step.drafted:
            return f"{where}: accepted {step.accepted} > drafted {step.drafted}"
        if step.drafted > N_MAX.high:  # type: ignore[operator]
            return f"{where}: drafted {step.drafted} (a step drafts at most {N_MAX.describe()})"
        if step.landed > step.accepted + 1:
            return f"{where}: landed {step.landed} tokens for accepted {step.accepted} (at most accepted + 1)"
        for name in ("step_s", "draft_s", "verify_s"):
            if _bad_seconds(getattr(step, name)):
                return f"{where}: {name} = {getattr(step, name)!r}"
    if n_tokens is not None and steps:
        landed = sum(s.landed for s in steps)
        if landed > n_tokens:
            return f"steps landed {landed} tokens of a generation of {n_tokens}"
    if _bad_seconds(gen_s):
        return f"gen_s = {gen_s!r}"
    if _bad_seconds(prompt_s):
        return f"prompt_s = {prompt_s!r}"
    if gen_s is not None and n_tokens is not None and n_tokens > 1 and gen_s < n_tokens * MIN_TOKEN_S:
        return f"gen_s = {gen_s:.3g} s for {n_tokens} tokens (under {MIN_TOKEN_S:g} s a token)"
    return None
