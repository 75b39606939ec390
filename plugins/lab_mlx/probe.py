"""Verify cost on MLX (``lab probe``): seconds of one target pass over w
tokens of one sequence after a mid-generation prefix, the same measurement
the llama.cpp backend's "decode" method makes, on the MLX target.

Each width's passes run back to back, as a sweep arm's equal-width verifies
do (the llama.cpp probe's order, for the same reason): MLX's CUDA backend
replays captured graphs from a cache of bounded size
(``MLX_CUDA_GRAPH_CACHE_SIZE``), and passes that cycle through every width
make it capture again. On an H100 the cycling probe priced the 27B twin's
one-row pass at 43.8 ms against the run's 35.8 ms baseline token, and T(8)
below T(4). On Metal and the CPU the order changes nothing but which drift
each width sees."""

from __future__ import annotations

import time
from typing import Sequence

from lab.kit.pass_order import check_order, median_pass_seconds
from lab_mlx.target import MlxTarget

PREFIX_TOKENS = 128
INNER_PASSES = 7
# Untimed passes before a width's timed ones: the first pass of a shape
# compiles its kernels (and, on CUDA, captures its graphs).
WARM_PASSES = 2
_FILLER = (
    "The lighthouse keeper climbed the spiral stairs every evening at dusk, trimmed the wick, "
    "polished the great lens and wrote the weather into the log before the lamp was lit. "
)


def decode_pass_seconds(target: MlxTarget, widths: Sequence[int], inner: int = INNER_PASSES,
                        order: str = "consecutive") -> list[float]:
    """Median seconds of one verification pass of w rows, per width (each
    pass evaluated before the clock stops; rolled back after). ``order``:
    "consecutive", each width's passes back to back after WARM_PASSES
    untimed ones; "interleaved", the widths cycled pass by pass, which
    spreads slow drift over all of them."""
    check_order(order)
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

    def one_pass(w: int) -> float:
        t0 = time.perf_counter()
        target.decode(rows[:w], all_logits=True)
        dt = time.perf_counter() - t0
        target.truncate(base)
        return dt

    seconds = median_pass_seconds(one_pass, widths, inner, order, WARM_PASSES)
    target.reset()
    return seconds
