"""Tiny GGUF models of architectures other than llama, for the in-process
engine's greedy-equivalence tests.

- :func:`build_gemma3`: a 2-layer Gemma-3-style model (Q/K norms, post-attention
  and post-FFN norms, GELU FFN, scaled embeddings, one sliding-window layer
  and one global layer), F16 weights, SmolLM2's tokenizer.
- :func:`build_gemma3_q4_k_m`: the same weights requantized to Q4_K_M with
  llama.cpp's quantize API, the file type the Gemma-3-270M GGUF that showed
  the divergence came in; its K-quant weights take the CPU backend's
  repacked kernels.

Unlike the server route's tiny models, whose peaked logits keep greedy picks
clear of ties, these are built to have near ties everywhere: small-scale
embeddings tied to the LM head give flat logits, and every token has a twin
whose embedding differs by a few F16 steps, so a greedy pick is decided in
the last bits of a logit and any difference between how a one-row decode
and a verify batch compute a position shows up as a different token within a
few hundred tokens. That is what a test of batch-invariant decoding needs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

ARCH = "gemma3"
N_EMBD = 256  # a multiple of 256, so K-quants apply
N_HEAD = 4
N_HEAD_KV = 1
HEAD_DIM = 64
N_FF = 512
N_LAYER = 2
SLIDING_WINDOW = 64  # layer 0 slides within the first hundred tokens
SWA_PATTERN = 2  # layer 0 sliding, layer 1 global
N_CTX_TRAIN = 4096
EMBD_SCALE = 0.05  # flat logits: see the module docstring
TWIN_JITTER = 1e-4


def _mat(rng: np.random.Generator, rows: int, cols: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal((rows, cols)) * (scale / np.sqrt(cols))).astype(np.float16)


def _norm(n: int) -> np.ndarray:
    return np.ones(n, dtype=np.float32)


def _twin_embeddings(rng: np.random.Generator, n_vocab: int) -> np.ndarray:
    """Embeddings (tied to the LM head) in twins: token 2k+1 is token 2k
    nudged by a few F16 steps, so whichever of the pair leads, the other
    trails it by a logit gap of the size of a summation-order difference."""
    embd = rng.standard_normal((n_vocab, N_EMBD)) * EMBD_SCALE
    embd[1::2] = embd[0::2][: n_vocab // 2] + rng.standard_normal((n_vocab // 2, N_EMBD)) * TWIN_JITTER
    return embd.astype(np.float16)


def build_gemma3(out: Path) -> None:
    import gguf

    from lab.kit.tiny_gguf import finish, smollm2_tokenizer, writer

    tok = smollm2_tokenizer()
    w = writer(out, ARCH, tok)
    w.add_uint32(f"{ARCH}.block_count", N_LAYER)
    w.add_uint32(f"{ARCH}.context_length", N_CTX_TRAIN)
    w.add_uint32(f"{ARCH}.embedding_length", N_EMBD)
    w.add_uint32(f"{ARCH}.feed_forward_length", N_FF)
    w.add_uint32(f"{ARCH}.attention.head_count", N_HEAD)
    w.add_uint32(f"{ARCH}.attention.head_count_kv", N_HEAD_KV)
    w.add_uint32(f"{ARCH}.attention.key_length", HEAD_DIM)
    w.add_uint32(f"{ARCH}.attention.value_length", HEAD_DIM)
    w.add_float32(f"{ARCH}.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_float32(f"{ARCH}.rope.freq_base", 1_000_000.0)
    w.add_float32(f"{ARCH}.rope.freq_base_swa", 10_000.0)
    w.add_uint32(f"{ARCH}.attention.sliding_window", SLIDING_WINDOW)
    w.add_uint32(f"{ARCH}.attention.sliding_window_pattern", SWA_PATTERN)
    w.add_uint32(f"{ARCH}.vocab_size", tok.n_vocab)
    w.add_uint32("general.file_type", int(gguf.LlamaFileType.MOSTLY_F16))
    rng = np.random.default_rng(2701)
    w.add_tensor("token_embd.weight", _twin_embeddings(rng, tok.n_vocab))
    w.add_tensor("output_norm.weight", _norm(N_EMBD))
    for i in range(N_LAYER):
        w.add_tensor(f"blk.{i}.attn_norm.weight", _norm(N_EMBD))
        w.add_tensor(f"blk.{i}.attn_q.weight", _mat(rng, N_HEAD * HEAD_DIM, N_EMBD))
        w.add_tensor(f"blk.{i}.attn_k.weight", _mat(rng, N_HEAD_KV * HEAD_DIM, N_EMBD))
        w.add_tensor(f"blk.{i}.attn_v.weight", _mat(rng, N_HEAD_KV * HEAD_DIM, N_EMBD))
        w.add_tensor(f"blk.{i}.attn_q_norm.weight", _norm(HEAD_DIM))
        w.add_tensor(f"blk.{i}.attn_k_norm.weight", _norm(HEAD_DIM))
        w.add_tensor(f"blk.{i}.attn_output.weight", _mat(rng, N_EMBD, N_HEAD * HEAD_DIM))
        w.add_tensor(f"blk.{i}.post_attention_norm.weight", _norm(N_EMBD))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", _norm(N_EMBD))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", _mat(rng, N_FF, N_EMBD))
        w.add_tensor(f"blk.{i}.ffn_up.weight", _mat(rng, N_FF, N_EMBD))
        w.add_tensor(f"blk.{i}.ffn_down.weight", _mat(rng, N_EMBD, N_FF))
        w.add_tensor(f"blk.{i}.post_ffw_norm.weight", _norm(N_EMBD))
    finish(w)


def build_gemma3_q4_k_m(out: Path) -> None:
    from lab_llamacpp.engine import quantize

    f16 = out.with_name(out.name + ".f16")
    try:
        build_gemma3(f16)
        quantize(str(f16), str(out), "Q4_K_M")
    finally:
        f16.unlink(missing_ok=True)
