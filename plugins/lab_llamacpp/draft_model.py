"""A GGUF draft model on llama.cpp for the draft-model drafter."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from lab import models
from lab.api import Draft, Drafter, DrafterContext
from lab.events import Cell
from lab.speculative import softmax


class LlamaDraftModel(Drafter):
    name = "draft-model/llamacpp"

    def __init__(self, options: Mapping[str, Any], ctx: DrafterContext) -> None:
        super().__init__(options, ctx)
        self._seen: list[int] = []  # tokens whose KV the draft context holds
        self.model: Any = None
        self.context: Any = None

    def load(self) -> None:
        from lab_llamacpp import engine

        path = models.resolve(str(self.opts["model"]))
        self.model = engine.Model(str(path))
        if self.model.n_vocab != self.ctx.vocab_size:
            n = self.model.n_vocab
            self.close()
            raise ValueError(f"draft model {path} has {n} tokens, the target {self.ctx.vocab_size}: vocabularies must match")
        n_ctx = int(self.opts.get("n_ctx") or 0) or self.ctx.n_ctx
        threads = int(self.opts.get("threads") or 0) or self.ctx.threads or engine.default_threads()
        self.context = engine.Context(self.model, n_ctx, 512, threads)
        self.context.set_sampling(engine.Sampling(0.0, self.ctx.seed, True))
        self.temperature = self.ctx.temperature
        self.rng = np.random.default_rng(self.ctx.seed + 1)

    def begin(self, prompt_ids: Sequence[int], cell: Cell) -> None:
        # Process the prompt now so it counts as prompt time, not draft time.
        self.context.reset()
        self._seen = []
        self._sync(list(prompt_ids))

    def _sync(self, context: list[int]) -> None:
        """Make the draft KV hold exactly ``context[:-1]`` and decode the last
        token, keeping logits for it. Rejected draft tokens are removed."""
        common = 0
        limit = min(len(self._seen), len(context) - 1)
        while common < limit and self._seen[common] == context[common]:
            common += 1
        self.context.truncate(common)
        self._seen = self._seen[:common]
        todo = context[common:]
        self.context.decode(todo, "last")
        self._seen.extend(todo)

    def draft(self, context: Sequence[int], k: int) -> Draft:
        self._sync(list(context))
        tokens: list[int] = []
        probs: list[np.ndarray] = []
        for i in range(k):
            if self.temperature > 0:
                p = softmax(self.context.logits(-1), self.temperature, self.model.eog_ids)
                tok = int(self.rng.choice(len(p), p=p))
                probs.append(p)
            else:
                tok = self.context.argmax(-1, self.model.eog_ids)
            tokens.append(tok)
            if i + 1 < k:
                self.context.decode([tok], "last")
                self._seen.append(tok)
        return Draft(tuple(tokens), probs if self.temperature > 0 else None)

    def memory_bytes(self) -> int | None:
        if self.model is None:
            return None
        return self.model.size_bytes + (self.context.state_bytes() if self.context else 0)

    def close(self) -> None:
        if self.context is not None:
            self.context.close()
            self.context = None
        if self.model is not None:
            self.model.close()
            self.model = None
