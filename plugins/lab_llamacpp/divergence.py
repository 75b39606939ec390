"""Why a greedy speculative cell left its baseline, checked on the engine
after the cell's clocks stopped: the cell's own batches
(:class:`lab.kit.speculative.TraceStep`) are replayed up to the first
differing token, computed both as a verify row and alone: different picks
prove batch variance."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from lab.kit.speculative import TraceStep

if TYPE_CHECKING:
    from lab_llamacpp.target import LlamaTarget

BATCH_VARIANCE = "engine batch variance"
NON_DETERMINISM = "engine non-determinism"
NOT_ESTABLISHED = "not established"


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _gap(logits: np.ndarray, a: int, b: int) -> float:
    """How far token a's logit lies above token b's in one computation."""
    return float(logits[a]) - float(logits[b])


def explain(
    target: LlamaTarget,
    prompt_ids: Sequence[int],
    trace: Sequence[TraceStep],
    output_ids: Sequence[int],
    baseline_ids: Sequence[int],
    notes: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """The evidence for the first token where ``output_ids`` leaves
    ``baseline_ids`` (None when they agree). Leaves the context in no
    particular state: the next cell resets it."""
    d = first_difference(output_ids, baseline_ids)
    if d is None or d >= min(len(output_ids), len(baseline_ids)):
        return None
    t0 = time.perf_counter()
    out: dict[str, Any] = {
        "cause": NOT_ESTABLISHED, "token": d, "baseline_token": int(baseline_ids[d]),
        "output_token": int(output_ids[d]), **(notes or {}),
    }
    try:
        out.update(_check(target, prompt_ids, trace, output_ids, baseline_ids, d))
    finally:
        out["check_s"] = time.perf_counter() - t0
    # The tokens as text, for the report (which has no tokenizer).
    for key in ("baseline", "output", "one_row", "batch"):
        tok = out.get(f"{key}_token" if key in ("baseline", "output") else f"{key}_pick")
        if tok is not None:
            out[f"{key}_piece"] = target.piece(int(tok)).decode("utf-8", errors="replace")
    return out


def _check(
    target: LlamaTarget, prompt_ids: Sequence[int], trace: Sequence[TraceStep], output_ids: Sequence[int],
    baseline_ids: Sequence[int], d: int,
) -> dict[str, Any]:
    at = next((i for i, s in enumerate(trace) if s.out_index <= d < s.out_index + s.landed), None)
    if at is None:
        return {"reason": "the first token comes from the prompt pass, which the baseline decodes alike"}
    step = trace[at]
    base_tok, out_tok = int(baseline_ids[d]), int(output_ids[d])

    # The loop's own batches up to the step that produced token d.
    target.reset()
    target.decode(prompt_ids, all_logits=False)
    for s in trace[:at]:
        target.decode(s.tokens, all_logits=s.verify)
        if s.verify:
            target.truncate(s.base + s.landed)
    if target.n_past != step.base:
        return {"reason": f"the replay reached KV length {target.n_past}, not the step's {step.base}"}
    row = d - step.out_index
    width = len(step.tokens)
    target.decode(step.tokens, all_logits=step.verify)
    read = row if step.verify else -1
    batch_pick = target.pick(read)
    batch_logits = target.ctx.logits(read)
    found: dict[str, Any] = {"kv_len": step.base + row + 1, "width": width, "row": row, "batch_pick": batch_pick}
    if batch_pick != out_tok:
        return {**found, "reason": "replaying the cell's batches did not reproduce its token"}

    if step.verify:
        # The same position on the same KV cache, decoded alone.
        target.truncate(step.base + row)
        target.decode([step.tokens[row]], all_logits=False)
        one_pick = target.pick(-1)
        one_logits = target.ctx.logits(-1)
        found.update(one_row_pick=one_pick)
        if one_pick != batch_pick:
            return {
                **found, "cause": BATCH_VARIANCE, "kind": "verify row",
                # Positive: the one-row pick leads in that computation.
                "one_row_gap": _gap(one_logits, one_pick, batch_pick),
                "batch_gap": _gap(batch_logits, one_pick, batch_pick),
                "one_row_is_baseline": one_pick == base_tok,
            }

    # Token d is what a one-row decode picks on the loop's KV cache: the
    # difference is in that cache. Decode the common prefix as the baseline did.
    target.reset()
    target.decode(prompt_ids, all_logits=False)
    for tok in output_ids[:d]:
        target.decode([tok], all_logits=False)
    alone_pick = target.pick(-1)
    alone_logits = target.ctx.logits(-1)
    found.update(one_row_prefix_pick=alone_pick)
    if alone_pick != base_tok:
        return {**found, "cause": NON_DETERMINISM,
                "reason": "decoding the common prefix one row at a time did not repeat the baseline's token"}
    return {
        **found, "cause": BATCH_VARIANCE, "kind": "kv cache",
        "one_row_gap": _gap(alone_logits, base_tok, out_tok),
        "batch_gap": _gap(batch_logits, base_tok, out_tok),
        "one_row_is_baseline": True,
    }
