"""An MLX draft model for the draft-model drafter (dispatched to by
lab_drafters.draft_model for stack "mlx"). Any model the mlx backend loads
(MLX directory, GGUF, tiny:...) can draft, if its vocabulary matches."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from lab import models
from lab.api import Draft, Drafter, DrafterContext
from lab.events import Cell
from lab.speculative import softmax


class MlxDraftModel(Drafter):
    name = "draft-model/mlx"

    def __init__(self, options: Mapping[str, Any], ctx: DrafterContext) -> None:
        super().__init__(options, ctx)
        self._seen: list[int] = []  # tokens whose state the draft cache holds
        self.loaded: Any = None
        self.target: Any = None

    def load(self) -> None:
        from lab_mlx.engine import session_engine

        # Drafting runs inside the MLX backend's generate, on its engine
        # thread; load there too, so all of a session's MLX work shares one
        # thread and stream.
        engine = session_engine()
        if engine is None:
            self._load()
        else:
            engine.call(self._load)

    def _load(self) -> None:
        from lab_mlx.loader import load_target
        from lab_mlx.target import MlxTarget

        path = models.resolve(str(self.opts["model"]))
        self.loaded = load_target(path)
        n = self.loaded.vocab.n_vocab
        if n != self.ctx.vocab_size:
            self.close()
            raise ValueError(f"draft model {path} has {n} tokens, the target {self.ctx.vocab_size}: vocabularies must match")
        n_ctx = int(self.opts.get("n_ctx") or 0) or self.ctx.n_ctx
        self.target = MlxTarget(self.loaded.model, self.loaded.vocab, n_ctx)
        self.target.set_sampling(0.0, self.ctx.seed, True)
        self.temperature = self.ctx.temperature
        self.rng = np.random.default_rng(self.ctx.seed + 1)

    def begin(self, prompt_ids: Sequence[int], cell: Cell) -> None:
        # Process the prompt now so it counts as prompt time, not draft time.
        self.target.reset()
        self._seen = []
        self._sync(list(prompt_ids))

    def _sync(self, context: list[int]) -> None:
        """Make the draft cache hold exactly ``context[:-1]`` and decode the
        last token. Rejected draft tokens are rolled back."""
        common = 0
        limit = min(len(self._seen), len(context) - 1)
        while common < limit and self._seen[common] == context[common]:
            common += 1
        if common < self.target.n_past:
            self.target.truncate(common)
        self._seen = self._seen[:common]
        todo = context[common:]
        self.target.decode(todo, all_logits=False)
        self._seen.extend(todo)

    def draft(self, context: Sequence[int], k: int) -> Draft:
        self._sync(list(context))
        tokens: list[int] = []
        probs: list[np.ndarray] = []
        for i in range(k):
            if self.temperature > 0:
                p = softmax(self.target.logits(-1), self.temperature, self.target.masked)
                tok = int(self.rng.choice(len(p), p=p))
                probs.append(p)
            else:
                tok = self.target.pick(-1)
            tokens.append(tok)
            if i + 1 < k:
                self.target.decode([tok], all_logits=False)
                self._seen.append(tok)
        return Draft(tuple(tokens), probs if self.temperature > 0 else None)

    def memory_bytes(self) -> int | None:
        return self.loaded.weight_bytes if self.loaded is not None else None

    def close(self) -> None:
        self.target = None
        self.loaded = None
