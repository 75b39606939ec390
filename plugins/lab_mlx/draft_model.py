"""An MLX draft model: what the mlx backend gives the draft-model drafter
(``MlxBackend.draft_model``). Any model the mlx backend loads (MLX
directory, GGUF, tiny:...) can draft, if its vocabulary matches."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from lab.kit import models
from lab.kit.speculative import TargetDrafter

if TYPE_CHECKING:
    from lab.api import DrafterContext
    from lab_mlx.engine import EngineThread


class MlxDraftModel(TargetDrafter):
    name = "draft-model/mlx"

    loaded: Any = None

    def __init__(self, options: Mapping[str, Any], ctx: DrafterContext, engine: EngineThread) -> None:
        super().__init__(options, ctx)
        # loaded on the engine thread, where drafting runs: one thread and stream
        self.engine = engine

    def load(self) -> None:
        self.engine.call(self._load)

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
        # Greedy picks when the run is greedy; the run's temperature for the
        # distributions drafted tokens are sampled from otherwise.
        self.target.set_sampling(self.ctx.temperature, self.ctx.seed, True)

    def memory_bytes(self) -> int | None:
        return self.loaded.weight_bytes if self.loaded is not None else None

    def close(self) -> None:
        self.target = None
        self.loaded = None
