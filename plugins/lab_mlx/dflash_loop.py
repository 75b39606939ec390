"""The DFlash decode loop: drafting needs the target's hidden states, so
this is not :mod:`lab.kit.speculative`'s loop, but it emits the same events,
returns the same Generation and accepts by the same rules."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from lab.api import Cancelled, Generation, GenerationRequest
from lab.base.events import ALL_MEASURED, STEP_ONLY, Emit, StepEvent, now
from lab.kit.speculative import LoopStats, OutputStream, acceptor, check_room, plain_token
from lab_mlx.dflash_model import DFlashDraft
from lab_mlx.target import MlxTarget


class DFlashProposer:
    """Runs the draft for one generation: its KV cache of projected target
    hidden states and the rows not fed to it yet."""

    def __init__(self, draft: DFlashDraft, seed: int) -> None:
        import mlx.core as mx

        self.draft = draft
        self.cache = draft.make_cache()
        self.pending: Any = None  # hidden rows of context tokens the draft has not seen
        self.key = mx.random.key(seed)
        self.n_vocab = 0

    def add_context(self, hidden: Any) -> None:
        import mlx.core as mx

        self.pending = hidden if self.pending is None else mx.concatenate([self.pending, hidden], axis=1)

    @property
    def n_context(self) -> int:
        """Context rows the draft holds or has queued (should equal the
        target's n_past: every token but the pending one)."""
        queued = 0 if self.pending is None else int(self.pending.shape[1])
        return int(self.cache[0].offset) + queued

    def propose(self, last: int, k: int, temperature: float) -> tuple[list[int], list[np.ndarray] | None]:
        """Draft k tokens after ``last`` and evaluate them; with temperature
        also each drafted token's proposal distribution over the vocabulary."""
        import mlx.core as mx

        tokens, probs = self.propose_lazy(last, k, temperature)
        if probs is not None:
            mx.eval(tokens, probs)
            rows = np.array(probs, dtype=np.float64)
            return [int(t) for t in tokens[0].tolist()], [rows[i] for i in range(k)]
        mx.eval(tokens)
        return [int(t) for t in tokens[0].tolist()], None

    def propose_lazy(self, last: int, k: int, temperature: float) -> tuple[Any, Any]:
        """The draft graph, not evaluated: tokens (1, k) and, with
        temperature, proposal distributions (k, vocab)."""
        import mlx.core as mx

        s = self.draft.spec
        block = mx.array([[last] + [s.mask_token_id] * k])
        hidden = self.draft.features(block, self.pending, self.cache)
        self.pending = None
        logits = self.draft.logits(hidden)
        probs: Any = None
        if s.version == 2:
            key = None
            if temperature > 0:
                self.key, key = mx.random.split(self.key)
            tokens, cand, q = self.draft.candidate_selector(hidden, logits, block[:, 0], temperature, key)
            if q is not None:
                full = mx.zeros((k, logits.shape[-1]), dtype=mx.float32)
                probs = mx.put_along_axis(full, cand[0], q, axis=-1)
        elif temperature > 0:
            self.key, key = mx.random.split(self.key)
            scaled = logits[0].astype(mx.float32) / temperature
            tokens = mx.random.categorical(scaled, key=key)[None]
            probs = mx.softmax(scaled, axis=-1)
        else:
            tokens = mx.argmax(logits, axis=-1)
        return tokens, probs


def generate_dflash(
    target: MlxTarget,
    draft: DFlashDraft,
    prompt_ids: Sequence[int],
    req: GenerationRequest,
    emit: Emit,
    cancelled: Callable[[], bool],
    block_size: int,
    stats: LoopStats | None = None,
    split_clock: bool = True,
) -> Generation:
    """One cell with a DFlash draft, ``block_size - 1`` drafts a step
    verified in one pass; ``split_clock`` clocks draft and verify apart."""
    stats = stats if stats is not None else LoopStats()
    start = stats.mark()
    out = OutputStream(target, req, emit)
    accept = acceptor(req)
    proposer = DFlashProposer(draft, req.seed)

    t0 = now()
    target.reset()
    check_room(target, len(prompt_ids) + 1)
    target.decode(prompt_ids, all_logits=False)
    proposer.add_context(target.hidden)
    pending = target.pick(-1)
    t_prompt = now()
    out.land([pending], from_draft=False)

    step = 0  # this cell's steps; stats.steps counts the arm's
    while len(out.ids) < req.max_tokens:
        if cancelled():
            raise Cancelled()
        t_a = now()
        remaining = req.max_tokens - len(out.ids)
        k = min(block_size - 1, remaining - 1, target.n_ctx - target.n_past - 1)
        if k <= 0:
            pending, _ = plain_token(target, out, stats, pending, t_a, lambda: proposer.add_context(target.hidden))
            continue
        base = target.n_past
        if split_clock or req.temperature > 0:
            drafted, draft_probs = proposer.propose(pending, k, req.temperature)
            t_b = now()
            target.decode([pending, *drafted], all_logits=True)
        else:
            import mlx.core as mx

            lazy, _ = proposer.propose_lazy(pending, k, 0.0)
            mx.async_eval(lazy)
            t_b = now()
            target.decode(mx.concatenate([mx.array([[pending]]), lazy.astype(mx.int32)], axis=1), all_logits=True)
            drafted = target.ids_from(base + 1)
            draft_probs = None
        t_c = now()
        accepted, correction = accept(target, drafted, draft_probs)
        verify_hidden = target.hidden
        target.truncate(base + 1 + accepted)
        # The draft's next context: the verified rows of this pass.
        proposer.add_context(verify_hidden[:, : accepted + 1])
        t_d = now()

        landed = out.land_step(drafted, accepted, correction)
        pending = correction
        stats.steps += 1
        split = split_clock or req.temperature > 0
        if split:
            stats.draft_s += t_b - t_a
            stats.engine_s += t_c - t_b
        else:
            stats.engine_s += t_c - t_a
        emit(
            StepEvent(
                req.cell, step, drafted=len(drafted), accepted=accepted, landed=len(landed),
                draft_s=t_b - t_a if split else None, verify_s=t_d - t_b if split else None, step_s=t_d - t_a,
                clocks=ALL_MEASURED if split else STEP_ONLY,
            )
        )
        step += 1
        stats.loop_s += now() - t_a
    t_end = now()
    return Generation(
        text=out.text(), ids=out.ids, prompt_tokens=len(prompt_ids),
        prompt_s=t_prompt - t0, gen_s=t_end - t_prompt,
        engine_report={
            **stats.cell_report(start),
            "draft_context": proposer.n_context,
        },
    )
