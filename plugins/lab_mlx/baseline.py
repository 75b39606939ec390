"""The mlx backend's greedy baseline, pipelined as mlx-lm's generate_step
is (the next token's pass queued before the current one is read back), so
the baseline does not carry graph building a speculative arm does not."""

from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence

from lab.api import Cancelled, Generation, GenerationRequest
from lab.base.events import Emit, now
from lab.kit.speculative import OutputStream, check_room
from lab_mlx.target import MlxTarget


def _read(y: Any) -> int:
    """Read back one token id (waits for its evaluation)."""
    value: Any = y.item()
    return int(value)


def pipelined(target: MlxTarget, first: int, count: int) -> Iterator[int]:
    """The ``count`` greedy tokens after ``first``, each pass queued before
    the token before it is read back; ``n_past`` is the caller's to keep."""
    import mlx.core as mx

    def step(y: Any) -> Any:
        logits = target.model(y.reshape(1, 1), cache=target.cache)[:, -1]
        if target.mask is not None:
            logits = logits + target.mask
        return mx.argmax(logits, axis=-1)

    y = mx.array([first])
    for i in range(count):
        nxt = step(y)
        mx.async_eval(nxt)
        if i > 0:
            yield _read(y)
        y = nxt
    if count > 0:
        yield _read(y)


def generate_greedy_pipelined(
    target: MlxTarget, prompt_ids: Sequence[int], req: GenerationRequest, emit: Emit, cancelled: Callable[[], bool]
) -> Generation:
    out = OutputStream(target, req, emit)
    t0 = now()
    target.reset()
    check_room(target, len(prompt_ids) + req.max_tokens)
    target.decode(prompt_ids, all_logits=False)
    first = target.pick(-1)
    t_prompt = now()
    out.land([first], from_draft=False)
    count = max(0, req.max_tokens - 1)
    if count and cancelled():
        raise Cancelled()
    for i, token in enumerate(pipelined(target, first, count)):
        out.land([token], from_draft=False)
        if i + 1 < count and cancelled():
            raise Cancelled()
    # Keep the target's bookkeeping true: every token but the last is in the cache.
    target.n_past += count
    t_end = now()
    return Generation(
        text=out.text(), ids=out.ids, prompt_tokens=len(prompt_ids),
        prompt_s=t_prompt - t0, gen_s=t_end - t_prompt,
        engine_report={"pipelined": True},
    )
