"""The llama.cpp target as the lab's speculative loop sees it, and when a
backend should pick tokens on the device: shared by the backend, the draft
model, the device picks and the divergence check, which import it, never
the backend."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from lab.kit.speculative import softmax

if TYPE_CHECKING:
    from lab_llamacpp.engine import Context, Model


def close_engine(context: Context | None, model: Model | None) -> tuple[None, None]:
    """Free a context, then the model it came from (either may be None);
    returns what the holder's two attributes become."""
    if context is not None:
        context.close()
    if model is not None:
        model.close()
    return None, None


class LlamaTarget:
    """Adapts a llama.cpp context to lab.kit.speculative.Target."""

    def __init__(self, ctx: Context, temperature: float, ignore_eos: bool) -> None:
        self.ctx = ctx
        self.model = ctx.model
        self.n_ctx = ctx.n_ctx
        self.n_vocab = ctx.model.n_vocab
        self.temperature = temperature
        self.masked = ctx.model.eog_ids if ignore_eos else []
        self._masked_set = frozenset(self.masked)

    @property
    def n_past(self) -> int:
        return self.ctx.n_past

    def reset(self) -> None:
        self.ctx.reset()

    def decode(self, ids: Sequence[int], all_logits: bool) -> None:
        self.ctx.decode(ids, "all" if all_logits else "last")

    def submit(self, ids: Sequence[int], all_logits: bool) -> None:
        self.ctx.decode(ids, "all" if all_logits else "last", wait=False)

    def wait(self) -> None:
        self.ctx.wait()

    def pick(self, row: int) -> int:
        if self.temperature <= 0:
            return self.ctx.argmax(row, self._masked_set)
        return self.ctx.sample(row)

    def probs(self, row: int) -> np.ndarray:
        return softmax(self.ctx.logits(row), self.temperature, self.masked)

    def truncate(self, n_keep: int) -> None:
        self.ctx.truncate(n_keep)

    def piece(self, token: int) -> bytes:
        return self.model.piece(token)


def wants_gpu_pick(setting: str, n_gpu_layers: int, temperature: float, verifies: bool = True) -> bool:
    """Whether an arm picks greedy tokens with llama.cpp's backend sampler:
    "auto" for a greedy verifying context on a GPU; "on" on the CPU too."""
    if setting == "on":
        return True
    if setting != "auto" or temperature > 0 or n_gpu_layers == 0 or not verifies:
        return False
    import llama_cpp as ll

    return bool(ll.llama_supports_gpu_offload())
