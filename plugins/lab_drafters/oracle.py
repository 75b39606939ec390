"""The oracle drafter replays its stack's baseline output, optionally with a
known error rate. With greedy decoding it is accepted exactly as often as
asked, so it measures the backend's cost of a step at a known acceptance."""

from __future__ import annotations

import random
from typing import Any, Mapping, Sequence

from lab.api import Draft, Drafter, DrafterContext, Option
from lab.events import Cell


class OracleDrafter(Drafter):
    name = "oracle"
    description = "replays the same stack's baseline tokens (calibrates step cost at known acceptance)"
    options = (
        Option("error_rate", float, 0.0, "probability that a drafted token is replaced by a wrong one", min=0, max=1),
        Option("seed", int, 0, "seed for the error draws", min=0, max=2**32 - 1),
    )
    needs_baseline = True

    def __init__(self, options: Mapping[str, Any], ctx: DrafterContext) -> None:
        super().__init__(options, ctx)
        self.error_rate = float(self.opts.get("error_rate", 0.0))
        if not 0.0 <= self.error_rate <= 1.0:
            raise ValueError("oracle error_rate must be within [0, 1]")
        self.seed = int(self.opts.get("seed", 0))
        self._ref: Sequence[int] = ()
        self._n_prompt = 0
        self._rng = random.Random(self.seed)

    def begin(self, prompt_ids: Sequence[int], cell: Cell) -> None:
        ref = self.ctx.reference(cell.prompt, cell.round)
        if ref is None:
            raise RuntimeError(f"oracle: no baseline tokens for prompt {cell.prompt!r}; the baseline arm must run first")
        self._ref = ref
        self._n_prompt = len(prompt_ids)
        self._rng = random.Random(f"{self.seed}:{cell.prompt}:{cell.round}")

    def draft(self, context: Sequence[int], k: int) -> Draft:
        pos = len(context) - self._n_prompt
        tokens = list(self._ref[pos : pos + k])
        if self.error_rate > 0:
            vocab = max(self.ctx.vocab_size, 2)
            for i, tok in enumerate(tokens):
                if self._rng.random() < self.error_rate:
                    tokens[i] = (tok + self._rng.randrange(1, vocab)) % vocab
        return Draft(tuple(tokens))
