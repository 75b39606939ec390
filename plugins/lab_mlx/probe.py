"""Verify cost on MLX (``lab probe``): seconds of one target pass over w
tokens of one sequence after a mid-generation prefix, the same measurement
the llama.cpp backend's "decode" method makes, on the MLX target."""

from __future__ import annotations

import statistics
import time
from typing import Sequence

from lab_mlx.target import MlxTarget

PREFIX_TOKENS = 128
INNER_PASSES = 7
_FILLER = (
    "The lighthouse keeper climbed the spiral stairs every evening at dusk, trimmed the wick, "
    "polished the great lens and wrote the weather into the log before the lamp was lit. "
)


def decode_pass_seconds(target: MlxTarget, widths: Sequence[int], inner: int = INNER_PASSES) -> list[float]:
    """Median seconds of one verification pass of w rows, per width (each
    pass evaluated before the clock stops; rolled back after)."""
    prefix = target.vocab.encode(_FILLER * 8, add_special=True)[:PREFIX_TOKENS]
    rows = target.vocab.encode(_FILLER * 2, add_special=False)
    if len(rows) < max(widths):
        raise ValueError(f"widths up to {max(widths)} need more filler tokens than {len(rows)}")
    if len(prefix) + max(widths) > target.n_ctx:
        raise ValueError(f"n_ctx {target.n_ctx} is too small for a {len(prefix)}-token prefix and {max(widths)} rows")
    target.set_sampling(0.0, 0, False)
    target.reset()
    target.decode(prefix, all_logits=False)
    base = target.n_past
    # One untimed pass per width: MLX compiles kernels per shape on first use.
    for w in widths:
        target.decode(rows[:w], all_logits=True)
        target.truncate(base)
    times: dict[int, list[float]] = {w: [] for w in widths}
    for _ in range(inner):
        # Widths interleaved so drift spreads over all of them.
        for w in widths:
            t0 = time.perf_counter()
            target.decode(rows[:w], all_logits=True)
            times[w].append(time.perf_counter() - t0)
            target.truncate(base)
    target.reset()
    return [statistics.median(times[w]) for w in widths]
