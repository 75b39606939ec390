"""Verify cost on MLX (``lab probe``): seconds of one target pass over w
tokens after a mid-generation prefix, each width back to back; T(1) is the
baseline's pipelined token (:func:`pipelined_token_seconds`)."""

from __future__ import annotations

import statistics
import time
from typing import Sequence

from lab.kit.pass_order import check_order, median_pass_seconds
from lab_mlx.target import MlxTarget

PREFIX_TOKENS = 128
INNER_PASSES = 7
# Tokens a timed run of the pipelined baseline decodes (its first pays the sync).
PIPELINED_TOKENS = 16
# Untimed passes before a width's timed ones: the first pass of a shape
# compiles its kernels (and, on CUDA, captures its graphs).
WARM_PASSES = 2
_FILLER = (
    "The lighthouse keeper climbed the spiral stairs every evening at dusk, trimmed the wick, "
    "polished the great lens and wrote the weather into the log before the lamp was lit. "
)


def decode_pass_seconds(target: MlxTarget, widths: Sequence[int], inner: int = INNER_PASSES,
                        order: str = "consecutive") -> list[float]:
    """Median seconds of one verification pass of w rows, per width, in
    ``order`` "consecutive" or "interleaved" (as the llama.cpp probe)."""
    check_order(order)
    prefix = _prefix(target)
    rows = target.vocab.encode(_FILLER * 2, add_special=False)
    if len(rows) < max(widths):
        raise ValueError(f"widths up to {max(widths)} need more filler tokens than {len(rows)}")
    if len(prefix) + max(widths) > target.n_ctx:
        raise ValueError(f"n_ctx {target.n_ctx} is too small for a {len(prefix)}-token prefix and {max(widths)} rows")
    target.set_sampling(0.0, 0, False)
    target.reset()
    target.decode(prefix, all_logits=False)
    base = target.n_past

    def one_pass(w: int) -> float:
        t0 = time.perf_counter()
        target.decode(rows[:w], all_logits=True)
        dt = time.perf_counter() - t0
        target.truncate(base)
        return dt

    seconds = median_pass_seconds(one_pass, widths, inner, order, WARM_PASSES)
    target.reset()
    return seconds


def pipelined_token_seconds(target: MlxTarget, inner: int = INNER_PASSES, tokens: int = PIPELINED_TOKENS) -> float:
    """Median seconds of a greedy baseline token as the mlx backend decodes
    it (:func:`lab_mlx.baseline.pipelined`), from the verify passes' prefix."""
    from lab_mlx.baseline import pipelined

    prefix = _prefix(target)
    if len(prefix) + tokens + 1 > target.n_ctx:
        raise ValueError(f"n_ctx {target.n_ctx} is too small for a {len(prefix)}-token prefix and {tokens} tokens")
    target.set_sampling(0.0, 0, False)
    target.reset()
    target.decode(prefix[:-1], all_logits=False)
    base = target.n_past

    def one_run() -> float:
        # a one-row decode keeps the state to roll back to (a recurrent
        # target's snapshot), then the pipelined tokens go in after it
        target.decode(prefix[-1:], all_logits=False)
        first = target.pick(-1)
        t0 = time.perf_counter()
        for _ in pipelined(target, first, tokens):
            pass
        dt = time.perf_counter() - t0
        target.n_past += tokens
        target.truncate(base)
        return dt / tokens

    one_run()
    seconds = statistics.median(one_run() for _ in range(inner))
    target.reset()
    return seconds


def _prefix(target: MlxTarget) -> list[int]:
    """The mid-generation prefix every timed pass follows: PREFIX_TOKENS of filler."""
    return list(target.vocab.encode(_FILLER * 8, add_special=True)[:PREFIX_TOKENS])

