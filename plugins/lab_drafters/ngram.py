"""Prompt-lookup drafting: find the latest earlier occurrence of the context's
last n tokens and propose what followed it."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from lab.api import Draft, Drafter, DrafterContext, Option
from lab.base.events import Cell


class NgramDrafter(Drafter):
    name = "ngram"
    description = "prompt lookup: continue the latest earlier match of the last n tokens"
    options = (
        Option("max_ngram", int, 3, "longest n-gram to match (tried first)", min=1, max=64),
        Option("min_ngram", int, 1, "shortest n-gram to fall back to", min=1, max=64),
    )

    def __init__(self, options: Mapping[str, Any], ctx: DrafterContext) -> None:
        super().__init__(options, ctx)
        self.max_n = int(self.opts.get("max_ngram", 3))
        self.min_n = int(self.opts.get("min_ngram", 1))
        if not 1 <= self.min_n <= self.max_n:
            raise ValueError("ngram needs 1 <= min_ngram <= max_ngram")
        self._reset()

    def _reset(self) -> None:
        # n -> {n-gram: end index of its latest occurrence}; an entry's end is
        # where its continuation starts.
        self._index: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in range(self.min_n, self.max_n + 1)}
        self._seen: list[int] = []

    def begin(self, prompt_ids: Sequence[int], cell: Cell) -> None:
        self._reset()

    def _extend(self, context: Sequence[int]) -> None:
        old = len(self._seen)
        if old > len(context) or list(context[:old]) != self._seen:
            self._reset()
            old = 0
        self._seen = list(context)
        # Index every n-gram that has at least one token after it; the tail
        # n-gram (ending at len(context)) is what we look up, not a match.
        for end in range(max(old, 1), len(context)):
            for n, table in self._index.items():
                if end >= n:
                    table[tuple(context[end - n : end])] = end

    def draft(self, context: Sequence[int], k: int) -> Draft:
        self._extend(context)
        for n in range(self.max_n, self.min_n - 1, -1):
            if len(context) < n:
                continue
            end = self._index[n].get(tuple(context[len(context) - n :]))
            if end is not None:
                return Draft(tuple(context[end : end + k]))
        return Draft(())
