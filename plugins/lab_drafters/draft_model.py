"""Draft with a smaller model that shares the target's vocabulary, run on
the target's engine through its DraftModelHost capability
(``DrafterContext.draft_model``): this class knows no engine."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from lab.api import Draft, Drafter, DrafterContext, Option
from lab.base.events import Cell


class DraftModelDrafter(Drafter):
    name = "draft-model"
    description = "a smaller model with the target's vocabulary drafts greedily (own context, rollback)"
    options = (
        Option("model", str, None, "draft model: a path, embedded:..., or tiny:...", required=True, model_ref=True),
        Option("n_ctx", int, 0, "draft context size (0: the run's n_ctx)", min=0, max=1048576),
        Option("threads", int, 0, "draft threads (0: the run's threads)", min=0, max=512),
        Option("n_gpu_layers", int, None, "draft layers offloaded to the GPU (default: the target arm's)", min=-1),
    )
    stacks = frozenset({"llamacpp", "mlx"})

    def __init__(self, options: Mapping[str, Any], ctx: DrafterContext) -> None:
        super().__init__(options, ctx)
        self._impl: Drafter | None = None

    def load(self) -> None:
        if self.ctx.draft_model is None:
            raise ValueError(f"draft-model: the {self.ctx.stack!r} backend cannot run a draft model")
        self._impl = self.ctx.draft_model(self.opts, self.ctx)
        self._impl.load()

    def begin(self, prompt_ids: Sequence[int], cell: Cell) -> None:
        assert self._impl is not None
        self._impl.begin(prompt_ids, cell)

    def draft(self, context: Sequence[int], k: int) -> Draft:
        assert self._impl is not None
        return self._impl.draft(context, k)

    def close(self) -> None:
        if self._impl is not None:
            self._impl.close()
            self._impl = None

    def memory_bytes(self) -> int | None:
        return self._impl.memory_bytes() if self._impl is not None else None
