"""A GGUF draft model on llama.cpp: what the llamacpp backend gives the
draft-model drafter (``LlamaCppBackend.draft_model``)."""

from __future__ import annotations

from typing import Any

from lab.base.machine import available_cores
from lab.kit import models
from lab.kit.speculative import TargetDrafter


class LlamaDraftModel(TargetDrafter):
    name = "draft-model/llamacpp"
    model: Any = None
    context: Any = None

    def load(self) -> None:
        from lab_llamacpp import engine
        from lab_llamacpp.target import LlamaTarget, wants_gpu_pick

        path = models.resolve(str(self.opts["model"]))
        # The backend fills in its arm's n_gpu_layers and gpu_pick where the
        # profile gives none: a draft beside an offloaded target is offloaded too.
        n_gpu_layers = int(self.opts.get("n_gpu_layers") or 0)
        self.model = engine.Model(str(path), n_gpu_layers=n_gpu_layers)
        if self.model.n_vocab != self.ctx.vocab_size:
            n = self.model.n_vocab
            self.close()
            raise ValueError(f"draft model {path} has {n} tokens, the target {self.ctx.vocab_size}: vocabularies must match")
        n_ctx = int(self.opts.get("n_ctx") or 0) or self.ctx.n_ctx
        threads = int(self.opts.get("threads") or 0) or self.ctx.threads or available_cores()
        # A draft's picks never decide what lands, so it keeps the one-row
        # kernels' speed.
        self.context = engine.Context(self.model, n_ctx, 512, threads, batch_invariant=False)
        self.context.set_sampling(engine.Sampling(self.ctx.temperature, self.ctx.seed, True))
        # Each drafted token is one pick: on a GPU, the backend sampler saves
        # copying a vocabulary-wide row of logits to the host per token.
        if wants_gpu_pick(str(self.opts.get("gpu_pick", "auto")), n_gpu_layers, self.ctx.temperature):
            from lab_llamacpp.gpu_pick import GpuPickTarget

            self.target = GpuPickTarget(self.context, self.ctx.temperature, ignore_eos=True)
        else:
            self.target = LlamaTarget(self.context, self.ctx.temperature, ignore_eos=True)

    def memory_bytes(self) -> int | None:
        if self.model is None:
            return None
        return self.model.size_bytes + (self.context.state_bytes() if self.context else 0)

    def close(self) -> None:
        from lab_llamacpp.target import close_engine

        self.target = None
        self.context, self.model = close_engine(self.context, self.model)
