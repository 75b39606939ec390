"""Draft-length policies, one rule for the live loop and the offline replay:
``fixed`` asks for n_max every step; ``grow-shrink`` starts at n_max, +1
after a step that kept all its drafts, -1 after a rejection, within
1..n_max; ``grow-halve`` halves on a rejection. A drafter that ran out and
had all it offered kept counts as keeping all."""

from __future__ import annotations

FIXED = "fixed"
GROW_SHRINK = "grow-shrink"
GROW_HALVE = "grow-halve"
POLICIES = (FIXED, GROW_SHRINK, GROW_HALVE)


def next_length(policy: str, length: int, drafted: int, accepted: int, n_max: int) -> int:
    """The length the next step asks for, after a step that asked for
    ``length`` and had ``accepted`` of its ``drafted`` tokens kept."""
    if policy == FIXED:
        return n_max
    if accepted >= drafted:
        return min(n_max, length + 1)
    if policy == GROW_HALVE:
        return max(1, length // 2)
    return max(1, length - 1)
