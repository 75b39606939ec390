"""Tiny GGUF models of other architectures for the in-process engine's
greedy-equivalence tests: a 2-layer Gemma-3-style model (F16, one
sliding-window and one global layer, SmolLM2's tokenizer) and its Q4_K_M
requantization, whose weights take the CPU backend's K-quant kernels.

They have near ties everywhere, so any decode/verify difference shows as a
different token within a few hundred."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lab.kit.tiny_gguf import Dims, F16Weights

ARCH = "gemma3"
N_EMBD = 256  # a multiple of 256, so K-quants apply
DIMS = Dims(n_embd=N_EMBD, n_head=4, n_head_kv=1, head_dim=64, n_ff=512)
N_LAYER = 2
SLIDING_WINDOW = 64  # layer 0 slides within the first hundred tokens
SWA_PATTERN = 2  # layer 0 sliding, layer 1 global
EMBD_SCALE = 0.05  # flat logits: see the module docstring
TWIN_JITTER = 1e-4


def _twin_embeddings(rng: np.random.Generator, n_vocab: int) -> np.ndarray:
    """Embeddings (tied to the LM head) in twins: token 2k+1 is token 2k
    nudged by a few F16 steps, so whichever of the pair leads, the other
    trails it by a logit gap of the size of a summation-order difference."""
    embd = rng.standard_normal((n_vocab, N_EMBD)) * EMBD_SCALE
    embd[1::2] = embd[0::2][: n_vocab // 2] + rng.standard_normal((n_vocab // 2, N_EMBD)) * TWIN_JITTER
    return embd.astype(np.float16)


def build_gemma3(out: Path) -> None:
    from lab.kit.tiny_gguf import add_attention, add_dense_ffn, add_dims, finish, smollm2_tokenizer, writer

    tok = smollm2_tokenizer()
    w = writer(out, ARCH, tok)
    add_dims(w, ARCH, DIMS, N_LAYER, tok.n_vocab)
    w.add_uint32(f"{ARCH}.attention.key_length", DIMS.head_dim)
    w.add_uint32(f"{ARCH}.attention.value_length", DIMS.head_dim)
    w.add_float32(f"{ARCH}.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_float32(f"{ARCH}.rope.freq_base", 1_000_000.0)
    w.add_float32(f"{ARCH}.rope.freq_base_swa", 10_000.0)
    w.add_uint32(f"{ARCH}.attention.sliding_window", SLIDING_WINDOW)
    w.add_uint32(f"{ARCH}.attention.sliding_window_pattern", SWA_PATTERN)
    W = F16Weights(2701)
    w.add_tensor("token_embd.weight", _twin_embeddings(W.rng, tok.n_vocab))
    w.add_tensor("output_norm.weight", W.ones(N_EMBD))
    for i in range(N_LAYER):
        add_attention(w, W, i, DIMS, qk_norm=True)
        w.add_tensor(f"blk.{i}.post_attention_norm.weight", W.ones(N_EMBD))
        add_dense_ffn(w, W, i, DIMS)
        w.add_tensor(f"blk.{i}.post_ffw_norm.weight", W.ones(N_EMBD))
    finish(w)


def build_gemma3_q4_k_m(out: Path) -> None:
    from lab_llamacpp.engine import quantize

    f16 = out.with_name(out.name + ".f16")
    try:
        build_gemma3(f16)
        quantize(str(f16), str(out), "Q4_K_M")
    finally:
        f16.unlink(missing_ok=True)
