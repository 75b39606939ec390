"""Runs z-lab's reference DFlash loop (``dflash.model_mlx``) on the same
target and draft, for the token-equality tests and the overhead benchmark;
the package is optional (its pins conflict with ours), found on PYTHONPATH."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence


@dataclass
class ReferenceRun:
    tokens: list[int]
    landed_per_step: list[int]
    gen_s: float  # from the first token to the last, like the lab's gen_s


def available() -> str | None:
    """None when the reference can run, else why not."""
    try:
        import dflash.model_mlx  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure means "skip"
        return f"z-lab's dflash reference is not importable: {type(exc).__name__}: {exc}"
    return None


def load_reference_draft(path: Path) -> Any:
    """The reference loader fetches from the Hugging Face hub; point its
    download at the local checkpoint directory instead."""
    import dflash.model_mlx as ref

    original = ref.snapshot_download
    ref.snapshot_download = lambda repo_id, **_: str(path)
    try:
        return ref.load_draft(str(path))
    finally:
        ref.snapshot_download = original


class _NoEos:
    """Tokenizer stand-in with no end-of-sequence ids, so the reference
    generates the full budget like the lab with ignore_eos."""

    def __init__(self, hf: Any) -> None:
        from mlx_lm.tokenizer_utils import TokenizerWrapper

        self.wrapper = TokenizerWrapper(hf)
        self.wrapper._eos_token_ids = set()  # noqa: SLF001 - mlx-lm's TokenizerWrapper has no setter for its end tokens


def run_reference(model: Any, draft: Any, hf_tokenizer: Any, prompt_ids: Sequence[int], block_size: int, max_tokens: int) -> ReferenceRun:
    """Greedy generation with the reference loop. ``model`` must be a fresh
    target (the reference wraps its layers)."""
    import dflash.model_mlx as ref
    import mlx.core as mx

    tok = _NoEos(hf_tokenizer).wrapper
    tokens: list[int] = []
    landed: list[int] = []
    t_first = None
    for resp in ref.stream_generate(model, draft, tok, mx.array(list(prompt_ids)), block_size=block_size, max_tokens=max_tokens, temperature=0.0):
        if not resp.tokens:
            continue
        if t_first is None:
            t_first = time.perf_counter()
        else:
            landed.append(len(resp.tokens))
        tokens.extend(resp.tokens)
    t_end = time.perf_counter()
    return ReferenceRun(tokens, landed, t_end - (t_first or t_end))
