"""The order a verify-cost probe times its passes in: ``consecutive``,
each width back to back after ``warm`` untimed passes, as a sweep arm runs
(a graph-replaying GPU backend captures once per width); ``interleaved``,
widths cycled pass by pass, spreading drift but recapturing at every change."""

from __future__ import annotations

import statistics
from typing import Callable, Sequence

ORDERS = ("consecutive", "interleaved")


def check_order(order: str) -> None:
    if order not in ORDERS:
        raise ValueError(f"probe order {order!r}: use {' or '.join(ORDERS)}")


def median_pass_seconds(one_pass: Callable[[int], float], widths: Sequence[int], inner: int, order: str,
                        warm: int) -> list[float]:
    """Median of ``inner`` timed passes per width, in ``order``;
    ``one_pass(w)`` runs one pass of w rows and returns its seconds."""
    check_order(order)
    times: dict[int, list[float]] = {w: [] for w in widths}
    if order == "consecutive":
        for w in widths:
            for _ in range(warm):
                one_pass(w)
            times[w] = [one_pass(w) for _ in range(inner)]
    else:
        for w in widths:
            one_pass(w)
        for _ in range(inner):
            for w in widths:
                times[w].append(one_pass(w))
    return [statistics.median(times[w]) for w in widths]
