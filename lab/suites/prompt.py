"""A suite's prompt and the error a suite that cannot be read raises: the
types the readers and the suite loader share, apart from both."""

from __future__ import annotations

from dataclasses import dataclass


class SuiteError(ValueError):
    """A suite that cannot be read; the message names the file and, where
    known, the line."""


@dataclass(frozen=True)
class SuitePrompt:
    """One prompt of a suite. ``turns`` holds the user's messages in order:
    one for a single-turn prompt, more for a conversation, where each turn is
    sent after the model answered the one before."""

    name: str
    category: str
    turns: tuple[str, ...]
    system: str | None = None

    @property
    def text(self) -> str:
        """The first turn: what a single-turn run sends."""
        return self.turns[0]

    @property
    def multi_turn(self) -> bool:
        return len(self.turns) > 1
