"""A saved cell's text against its baseline's text for the same prompt and
round: the common prefix plain, the first divergence onward marked, and in
what follows the stretches that differ from the baseline (difflib) marked
more strongly, so a reader sees where and how far the outputs part."""

from __future__ import annotations

import difflib
import re

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

AFTER_STYLE = "yellow"  # from the first divergence on
CHANGED_STYLE = "bold reverse red"  # what the baseline does not have there
MARK = "▶"


def first_divergence(text: str, baseline: str) -> int | None:
    """The first character where ``text`` and ``baseline`` differ, None
    when they are identical."""
    if text == baseline:
        return None
    n = min(len(text), len(baseline))
    return next((i for i in range(n) if text[i] != baseline[i]), n)


def diff_text(text: str, baseline: str) -> Text:
    """``text`` styled by its difference from ``baseline``."""
    at = first_divergence(text, baseline)
    if at is None:
        return Text(text)
    out = Text(text[:at])
    out.append(MARK, style="bold red")
    rest, base_rest = text[at:], baseline[at:]
    if not rest:
        out.append(f"(ends here; the baseline goes on {len(base_rest)} chars)", style=CHANGED_STYLE)
        return out
    # by words (and the spaces between), as a reader compares them: by
    # characters, difflib pairs stray letters of two different words
    mine, theirs = words(rest), words(base_rest)
    matcher = difflib.SequenceMatcher(None, theirs, mine, autojunk=False)
    for op, _, _, j1, j2 in matcher.get_opcodes():
        if j1 == j2:
            continue
        out.append("".join(mine[j1:j2]), style=AFTER_STYLE if op == "equal" else CHANGED_STYLE)
    return out


def words(text: str) -> list[str]:
    """``text`` as words and the whitespace between them (joined, it is ``text``)."""
    return re.findall(r"\s+|\S+", text)


def diff_caption(text: str, baseline: str, baseline_arm: str) -> Text:
    """One line over the diff: identical, or where it parts from the baseline."""
    at = first_divergence(text, baseline)
    if at is None:
        return Text(f"identical to {baseline_arm}", style="green")
    ratio = difflib.SequenceMatcher(None, words(baseline[at:]), words(text[at:]), autojunk=False).ratio()
    return Text.assemble(
        (f"differs from {baseline_arm} at char {at}", "bold red"),
        (f" · after it {ratio:.0%} alike · ", "dim"), (MARK, "bold red"), (" marks it", "dim"))


class DiffCaption(Static):
    """Where the cell parts from its baseline."""


class CellDiff(VerticalScroll, can_focus=False):
    """A saved cell's text with its difference from the baseline marked."""

    diff: Text | None = None

    def compose(self) -> ComposeResult:
        yield Static("", classes="cell-diff-text")

    def show(self, text: str, baseline: str) -> None:
        self.diff = diff_text(text, baseline)
        self.query_one(Static).update(self.diff)
        self.scroll_home(animate=False)
