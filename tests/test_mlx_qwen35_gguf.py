"""llama.cpp's qwen35 hybrid GGUF (synthetic:qwen35-tiny: gated delta-net
layers, one full-attention layer, an MTP block) on MLX through mlx-lm's
qwen3_5 model, against llama.cpp on the same file: the same prompt tokens,
the same greedy tokens (teacher-forced and free-running), logits within
the stacks' quantization noise (llama.cpp's CPU path rounds activations to
8 bits for Q4_0 products; a mapping error such as leaving the value heads
in ggml's tiled order moves them ten times as far)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core", reason="MLX is not installed (pip install -e '.[mlx]')")
pytest.importorskip("mlx_lm", reason="mlx-lm is not installed (pip install -e '.[mlx]')")

pytestmark = [pytest.mark.engine]

N_TOKENS = 32
PROMPT = "The lighthouse keeper"
# RMS of (MLX - llama.cpp) logits over the prompt and continuation: 0.05 when
# mapped right on this model, 0.56 with the value heads left tiled.
LOGIT_RMS_TOLERANCE = 0.15


@pytest.fixture(scope="module")
def gguf_path() -> Path:
    from lab_llamacpp import hybrid

    return hybrid.resolve("synthetic:qwen35-tiny")


@pytest.fixture(scope="module")
def loaded(gguf_path: Path) -> Any:
    from lab_mlx.loader import load_target

    return load_target(gguf_path)


def _llamacpp(path: Path, text: str) -> tuple[list[int], list[int], np.ndarray]:
    """Prompt ids, N_TOKENS greedy tokens and the logits of every position."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[llamacpp]')")
    from lab_llamacpp import engine

    model = engine.Model(str(path))
    ctx = engine.Context(model, 256, 256, 1)
    try:
        ids = model.tokenize(text)
        ctx.decode(ids, "all")
        rows = [ctx.logits(i) for i in range(len(ids))]
        out: list[int] = []
        for _ in range(N_TOKENS):
            out.append(int(np.argmax(rows[-1])))
            ctx.decode([out[-1]], "last")
            rows.append(ctx.logits(-1))
    finally:
        ctx.close()
        model.close()
    return ids, out, np.array(rows[:-1])


def test_greedy_tokens_and_logits_match_llamacpp(gguf_path: Path, loaded: Any) -> None:
    from lab_mlx.target import MlxTarget

    ids, want, ref = _llamacpp(gguf_path, PROMPT)
    assert loaded.vocab.encode(PROMPT, add_special=True) == ids
    logits = np.array(loaded.model(mx.array([ids + want[:-1]]))[0].astype(mx.float32))
    picks = logits[len(ids) - 1:].argmax(-1).tolist()
    first = next((i for i, (a, b) in enumerate(zip(picks, want)) if a != b), None)
    assert first is None, f"MLX's pick after {first} greedy tokens is {picks[first]}, llama.cpp's {want[first]}"
    rms = float(np.sqrt(np.mean((logits - ref) ** 2)))
    assert rms < LOGIT_RMS_TOLERANCE, f"logits differ by {rms:.3f} RMS (max {np.abs(logits - ref).max():.3f})"
    # MLX's own incremental decoding, recurrent state and KV cache included.
    target = MlxTarget(loaded.model, loaded.vocab, 256)
    target.set_sampling(0.0, 0, True)
    target.reset()
    target.decode(ids, all_logits=False)
    got = [target.pick(-1)]
    while len(got) < N_TOKENS:
        target.decode([got[-1]], all_logits=False)
        got.append(target.pick(-1))
    assert got == want


@pytest.mark.parametrize("text", [
    "Hello world, 42 times!\nNew line  two  spaces", " über café", "def lru_cache(maxsize): return maxsize",
])
def test_sentencepiece_tokens_match_llamacpp(gguf_path: Path, loaded: Any, text: str) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[llamacpp]')")
    from lab_llamacpp import engine

    model = engine.Model(str(gguf_path))
    try:
        want = model.tokenize(text)
    finally:
        model.close()
    assert loaded.vocab.encode(text, add_special=True) == want


def test_every_tensor_is_mapped_and_every_parameter_filled(gguf_path: Path, loaded: Any) -> None:
    from lab_mlx.gguf_qwen35 import map_weights, text_config
    from mlx.utils import tree_flatten

    raw, md = mx.load(str(gguf_path), return_metadata=True)
    cfg = text_config(md, 640)
    mapped = map_weights(raw, cfg)
    trunk = [k for k in raw if not k.startswith(f"blk.{cfg['num_hidden_layers']}.")]
    assert len(mapped) == len(trunk)
    params = {k for k, _ in tree_flatten(loaded.model.language_model.parameters())}
    assert set(mapped) == params
    with pytest.raises(ValueError, match="ssm_extra"):
        map_weights({**raw, "blk.0.ssm_extra.weight": raw["blk.0.ssm_a"]}, cfg)
    with pytest.raises(ValueError, match="attn_qkv"):
        map_weights({**raw, "blk.3.attn_qkv.weight": raw["blk.0.attn_qkv.weight"]}, cfg)


def test_value_heads_return_to_grouped_order() -> None:
    """The converter's reorder (grouped -> tiled), undone."""
    from lab_mlx.gguf_qwen35 import _grouped

    n_k, per_k, hd = 2, 3, 4
    grouped = np.arange(n_k * per_k * hd * 2).reshape(n_k * per_k * hd, 2)
    tiled = grouped.reshape(n_k, per_k, hd, 2).transpose(1, 0, 2, 3).reshape(-1, 2)
    np.testing.assert_array_equal(np.array(_grouped(mx.array(tiled), 0, n_k, per_k, hd)), grouped)
