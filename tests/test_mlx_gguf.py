"""The embedded SmolLM2 GGUF (Q4_1) on MLX against llama.cpp: same prompt
tokens, same first 32 greedy tokens (MLX checked after every prefix of
llama.cpp's greedy run in one pass, plus a few tokens of MLX's own
incremental decoding). On a mismatch the failure says where and by how much
the two stacks' logits differ."""

from __future__ import annotations

import pytest

mx = pytest.importorskip("mlx.core", reason="MLX is not installed (pip install -e '.[mlx]')")
pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[llamacpp]')")

from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from lab.base.machine import available_cores  # noqa: E402
from lab.kit import models  # noqa: E402

pytestmark = [pytest.mark.engine, pytest.mark.slow]

N_TOKENS = 32
PROMPT = "Write a 300-word essay about why lighthouses still matter in the age of satellite navigation."


@pytest.fixture(scope="module")
def gguf_path() -> str:
    try:
        return str(models.resolve("embedded:smollm2"))
    except models.ModelNotFound as exc:
        pytest.skip(str(exc))


def _greedy_llamacpp(path: str, ids: list[int]) -> tuple[list[int], list[np.ndarray]]:
    from lab_llamacpp import engine

    model = engine.Model(path)
    ctx = engine.Context(model, 512, 512, available_cores())
    ctx.set_sampling(engine.Sampling(0.0, 0, False))
    out, logits = [], []
    try:
        ctx.decode(ids, "last")
        for _ in range(N_TOKENS):
            row = ctx.logits(-1)
            logits.append(row)
            tok = int(np.argmax(row))
            out.append(tok)
            ctx.decode([tok], "last")
    finally:
        ctx.close()
        model.close()
    return out, logits


def _mlx_target() -> Any:
    from lab_mlx.loader import load_target
    from lab_mlx.target import MlxTarget

    loaded = load_target(models.resolve("embedded:smollm2"))
    target = MlxTarget(loaded.model, loaded.vocab, 512)
    target.set_sampling(0.0, 0, False)
    return target


def _teacher_forced_mlx(ids: list[int], continuation: list[int]) -> tuple[list[int], list[np.ndarray]]:
    """MLX's greedy pick after every prefix of ``continuation`` in one pass:
    if each equals llama.cpp's next token, MLX's own greedy run produces the
    same tokens (CPU MLX runs this model at a few tok/s, one pass is fast)."""
    target = _mlx_target()
    target.decode(ids + continuation[:-1], all_logits=True)
    first = len(ids) - 1
    logits = [target.logits(first + i).copy() for i in range(len(continuation))]
    return [int(np.argmax(row)) for row in logits], logits


def _free_running_mlx(ids: list[int], n: int) -> list[int]:
    target = _mlx_target()
    out: list[int] = []
    target.decode(ids, all_logits=False)
    for _ in range(n):
        out.append(target.pick(-1))
        target.decode([out[-1]], all_logits=False)
    return out


def test_prompt_tokens_match_llamacpp(gguf_path: str) -> None:
    from lab_llamacpp import engine
    from lab_mlx.loader import load_target

    loaded = load_target(models.resolve("embedded:smollm2"))
    model = engine.Model(gguf_path)
    try:
        chat = model.chat_prompt(PROMPT)
        want = model.tokenize(chat, add_special=False, parse_special=True)
        plain = model.tokenize(PROMPT + " 2024, 3.14 and tabs\there", add_special=True, parse_special=False)
    finally:
        model.close()
    assert loaded.vocab.encode(chat, add_special=False) == want
    # With an explicit system message both stacks render the same chat (the
    # GGUF's Jinja template otherwise adds SmolLM2's default system message).
    model = engine.Model(gguf_path)
    try:
        system = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
        with_system = model.tokenize(model.chat_prompt(PROMPT, system), add_special=False, parse_special=True)
    finally:
        model.close()
    assert loaded.vocab.prompt_ids(PROMPT, system, True) == with_system
    assert loaded.vocab.encode(PROMPT + " 2024, 3.14 and tabs\there", add_special=True) == plain
    assert b"".join(loaded.vocab.piece(t) for t in want).decode() == chat.replace("<|im_start|>", "").replace("<|im_end|>", "")


def test_first_32_greedy_tokens_match_llamacpp(gguf_path: str) -> None:
    from lab_llamacpp import engine

    model = engine.Model(gguf_path)
    try:
        ids = model.tokenize(model.chat_prompt(PROMPT), add_special=False, parse_special=True)
    finally:
        model.close()
    ref_tokens, ref_logits = _greedy_llamacpp(gguf_path, ids)
    mlx_tokens, mlx_logits = _teacher_forced_mlx(ids, ref_tokens)
    # Logit agreement where both stacks saw the same context.
    diffs = [float(np.abs(a - b).max()) for a, b in zip(ref_logits, mlx_logits)]
    if mlx_tokens != ref_tokens:
        i = next(j for j, (a, b) in enumerate(zip(ref_tokens, mlx_tokens)) if a != b)
        top2 = np.sort(ref_logits[i])[-2:]
        pytest.fail(
            f"greedy tokens diverge at generated token {i}: llama.cpp {ref_tokens[i]} vs MLX {mlx_tokens[i]}; "
            f"max |logit diff| at that step {diffs[i]:.4f} (llama.cpp top-2 margin {top2[1] - top2[0]:.4f}); "
            f"max |logit diff| before it {max(diffs[:i] or [0.0]):.4f}"
        )
    # MLX's own incremental decoding path agrees too (a few tokens: it is slow on CPU).
    assert _free_running_mlx(ids, 6) == ref_tokens[:6]
    # Same weights, different kernels (llama.cpp quantizes activations to 8
    # bits for Q4_1 dot products; MLX keeps them in float): the logits agree
    # to a small fraction of each row's spread.
    rel = [d / float(r.max() - r.min()) for d, r in zip(diffs, ref_logits)]
    assert max(rel) < 0.05, f"logits differ by up to {max(diffs):.3f} ({max(rel):.1%} of the row's spread) although tokens match"
