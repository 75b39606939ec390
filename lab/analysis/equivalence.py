"""Greedy equivalence: where a speculative output first leaves its
baseline's, shown the way the write-ups quote it ("More critically,"
becomes "Furthermore,") with a few words either side."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from lab.rows.build import first_divergence

CONTEXT_WORDS = 4
_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class Divergence:
    char: int
    token: int | None  # index of the first differing token, when ids are known
    before: str  # shared words just before the split
    baseline: str  # the baseline's words from the split on
    output: str  # this arm's words from the split on

    def line(self, against: str = "baseline") -> str:
        """The split as the report quotes it; ``against`` names what the
        output was held to (its baseline, or its cold first round)."""
        where = f"char {self.char}" + (f", token {self.token}" if self.token is not None else "")
        lead = f"…{self.before} " if self.before else ""
        return f"{where}: {lead}[{against}: “{self.baseline}” | here: “{self.output}”]"


def _word_start(text: str, pos: int) -> int:
    """Start of the word holding pos, so the split shows whole words."""
    while pos > 0 and not text[pos - 1].isspace():
        pos -= 1
    return pos


def divergence(
    baseline: str, output: str, baseline_ids: Sequence[int] | None = None, output_ids: Sequence[int] | None = None,
    words: int = CONTEXT_WORDS,
) -> Divergence | None:
    """None when the texts are identical."""
    char = first_divergence(baseline, output)
    if char is None:
        return None
    start = _word_start(baseline, char)
    before = " ".join(_WORD.findall(baseline[:start])[-words:])
    after_base = " ".join(_WORD.findall(baseline[start:])[:words])
    after_out = " ".join(_WORD.findall(output[start:])[:words])
    token = first_divergence(list(baseline_ids), list(output_ids)) if baseline_ids is not None and output_ids is not None else None
    return Divergence(char, token, before, after_base or "(end)", after_out or "(end)")
