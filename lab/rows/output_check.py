"""Is a cell's output text what a drafter is normally asked to predict? A
greedy loop or template markers written past end-of-text are trivially
predictable, so such a row is flagged (``degenerate_output``) and its
acceptance called unrepresentative."""

from __future__ import annotations

import re

import numpy as np

# The looping part must cover this share of the text (or the markers must).
MIN_SHARE = 0.5
# A pattern must come this many times in a row to be a loop.
MIN_REPEATS = 3
# Texts shorter than this are not judged: too little to tell a loop.
MIN_CHARS = 32
MIN_MARKER_RUN = 3
# Longest pattern looked for (a loop of whole paragraphs is still found).
MAX_PERIOD = 4096

# Texts of special tokens as chat templates write them.
_MARKER = re.compile(r"<\|[A-Za-z0-9_.:\-]{1,40}\|>|</?s>|\[/?INST\]|<unk>|<pad>|<eos>|<bos>")
_MARKER_RUN = re.compile(rf"(?:(?:{_MARKER.pattern})\s*){{{MIN_MARKER_RUN},}}")


def degenerate_output(text: str | None) -> str | None:
    """Why ``text`` is degenerate (one line), or None when it is not."""
    if not text or len(text) < MIN_CHARS:
        return None
    return _markers(text) or _repetition(text)


def _markers(text: str) -> str | None:
    found = _MARKER.findall(text)
    if not found:
        return None
    run = max((m.group(0) for m in _MARKER_RUN.finditer(text)), key=len, default="")
    covered = sum(len(m) for m in found)
    if run or covered >= MIN_SHARE * len(text):
        example = _MARKER.search(run or text)
        assert example is not None
        n_run = len(_MARKER.findall(run))
        what = f"a run of {n_run} template/control tokens" if run else \
            f"template/control tokens over {100 * covered / len(text):.0f}% of the output"
        return f"{what} ({example.group(0)!r} and the like)"
    return None


def _repetition(text: str) -> str | None:
    """The longest exactly periodic suffix over all periods; its share of
    the text decides."""
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    n = len(codes)
    best_len, best_p = 0, 0
    for p in range(1, min(n // MIN_REPEATS, MAX_PERIOD) + 1):
        same = codes[p:] == codes[:-p]
        # the run of matches that ends the text: the suffix has period p
        misses = np.flatnonzero(~same)
        run = len(same) - (int(misses[-1]) + 1 if len(misses) else 0)
        length = run + p
        if length >= MIN_REPEATS * p and length > best_len:
            best_len, best_p = length, p
    if best_len < MIN_SHARE * n:
        return None
    pattern = text[n - best_p:] if best_p <= 24 else text[n - best_p:n - best_p + 21] + "..."
    return (f"repeats a {best_p}-character pattern ({pattern!r}) over the last "
            f"{100 * best_len / n:.0f}% of the output")
