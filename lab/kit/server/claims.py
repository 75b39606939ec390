"""A server's own claims about a request (its token counts and timings) held
to what the lab saw, in one wording for every server stack: tokens past the
request's limit (:func:`past_limit`) and timings the lab's clock refutes
(:func:`clock_refutes`); the stack raises the message."""

from __future__ import annotations

import math

# a lab on a busy machine reads a fast server's stream late: the spread is wide
CLOCK_TOLERANCE = 1.5
CLOCK_SLACK_S = 0.1
CLOCK_SPREAD = 1000.0
CLOCK_MIN_SPAN_S = 1.0


def past_limit(n: int, limit: int, name: str = "max_tokens") -> str:
    """Why a stream that reached ``n`` tokens for a request of ``limit`` was ended."""
    return f"the server sent {n} tokens for {name} = {limit}; the stream was ended there"


def clock_refutes(phase_s: float, prompt_s: float, open_s: float, span_s: float) -> str | None:
    """Why the server's generation and prompt seconds cannot be true beside
    the lab's clock (the request open ``open_s``, its tokens arriving over
    ``span_s``), naming both figures; None when they can."""
    if not (math.isfinite(phase_s) and math.isfinite(prompt_s)) or phase_s < 0 or prompt_s < 0:
        return f"the server's timings are no durations: generation {phase_s!r} s, prompt {prompt_s!r} s"
    if phase_s + prompt_s > open_s * CLOCK_TOLERANCE + CLOCK_SLACK_S:
        return (f"the server says {phase_s + prompt_s:.4g} s (prompt {prompt_s:.4g} + generation "
                f"{phase_s:.4g}), but the request was open {open_s:.3f} s on the lab's clock "
                f"(tolerance x{CLOCK_TOLERANCE:g})")
    if span_s > CLOCK_MIN_SPAN_S and phase_s * CLOCK_SPREAD < span_s:
        return (f"the server says its generation took {phase_s:.4g} s, but its tokens arrived over "
                f"{span_s:.3f} s on the lab's clock (tolerance x{CLOCK_SPREAD:g})")
    return None
