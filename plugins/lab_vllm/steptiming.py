"""Seconds for each of vLLM's verify steps: the server's step records say
what each step did, the stream's chunks when tokens arrived; a chunk's
arrival gap is shared evenly by the iterations it carried."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

# how a step's seconds were found (the row's record, engine_report["step_timing"])
ONE_PER_CHUNK = "its chunk's arrival gap"
SHARED = "its chunk's arrival gap, shared with the other iterations that chunk carried"
MEAN = "the generation phase's mean seconds per iteration (no chunk matched the step)"


@dataclass(frozen=True)
class TimedStep:
    step_s: float
    landed: int
    how: str


def time_steps(chunks: Sequence[tuple[float, int]], per_step: Sequence[tuple[int, int]]) -> list[TimedStep]:
    """One :class:`TimedStep` per server step. ``chunks``: (arrival time,
    tokens) of every chunk in order, the prompt's first token included;
    ``per_step``: the server's (drafted, accepted) per step."""
    if not per_step:
        return []
    out: list[TimedStep | None] = [None] * len(per_step)
    landed = [int(a) + 1 for _, a in per_step]
    nxt = 0
    iterations = 0
    pairs = list(zip(chunks, chunks[1:]))
    for j, ((t_prev, _), (t, k)) in enumerate(pairs):
        last = j == len(pairs) - 1
        mine: list[int] = []
        plain = 0
        left = k
        while left > 0:
            need = landed[nxt] if nxt < len(per_step) else None
            # the last chunk may end a step early: max_tokens cut it
            if need is not None and (need <= left or last):
                landed[nxt] = min(need, left)
                mine.append(nxt)
                left -= landed[nxt]
                nxt += 1
            else:
                # a token of an iteration that drafted nothing
                plain += 1
                left -= 1
        n_iter = len(mine) + plain
        iterations += n_iter
        if not mine:
            continue
        share = (t - t_prev) / n_iter
        how = ONE_PER_CHUNK if n_iter == 1 else SHARED
        for i in mine:
            out[i] = TimedStep(share, landed[i], how)
    if any(s is None for s in out):
        phase = chunks[-1][0] - chunks[0][0] if len(chunks) > 1 else 0.0
        mean = phase / iterations if iterations else 0.0
        out = [s or TimedStep(mean, 0, MEAN) for s in out]
    return [s for s in out if s is not None]
