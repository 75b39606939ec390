"""Draft-length policies: how many tokens a speculative step asks its
drafter for, up to the arm's n_max.

One rule, shared by the lab's own loop (:mod:`lab.kit.speculative`, live)
and the offline replay (:mod:`lab.analysis.policy`), so that what the
replay predicts is what the live arm runs.

- ``fixed``: every step asks for n_max (the lab's behaviour before policies).
- ``grow-shrink``: start at n_max; +1 after a step that kept every token it
  drafted, -1 after one that rejected one; bounded to 1..n_max.
- ``grow-halve``: the same, but a rejection halves the length.

A step whose drafter returned fewer tokens than asked and had all of them
kept counts as keeping all its drafts (it grows): the drafter ran out, the
target did not refuse anything.
"""

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
