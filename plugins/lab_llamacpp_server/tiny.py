"""Tiny GGUF models for llama-server's speculative routes (random weights,
fixed seeds, SmolLM2's tokenizer): ``tiny:llama``, ``tiny:llama-notemplate``,
``tiny:llama-dflash`` and ``tiny:glm4moe-mtp``, for mechanics and counting."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from lab.kit.tiny_gguf import (
    Dims,
    F16Weights,
    Tokenizer,
    add_attention,
    add_dense_ffn,
    add_dims,
    finish,
    smollm2_tokenizer,
    writer,
)

N_EMBD = 64
DIMS = Dims(n_embd=N_EMBD, n_head=4, n_head_kv=2, head_dim=N_EMBD // 4, n_ff=128)
OUT_SCALE = 4.0  # of the attention and FFN outputs


def _common_kv(w: Any, arch: str, n_layer_all: int, tok: Tokenizer) -> None:
    add_dims(w, arch, DIMS, n_layer_all, tok.n_vocab)
    w.add_uint32(f"{arch}.rope.dimension_count", DIMS.head_dim)
    w.add_float32(f"{arch}.rope.freq_base", 10000.0)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)


def _embd(W: F16Weights, n_vocab: int) -> np.ndarray:
    # Unit-scale embeddings tied to the LM head make logits peaked, so
    # greedy picks are far from ties and reproducible across batch shapes.
    return W.rng.standard_normal((n_vocab, N_EMBD)).astype(np.float16)


def _attn(w: Any, W: F16Weights, i: int, qk_norm: bool = False) -> None:
    add_attention(w, W, i, DIMS, qk_norm=qk_norm, out_scale=OUT_SCALE)


def _dense_ffn(w: Any, W: F16Weights, i: int, norm: str = "ffn_norm") -> None:
    add_dense_ffn(w, W, i, DIMS, norm=norm, down_scale=OUT_SCALE)


LLAMA_LAYERS = 2


def build_llama(out: Path, chat_template: bool = True) -> None:
    """``chat_template = False`` leaves the template out of the metadata:
    ``tiny:llama-notemplate``, a model every stack must prompt alike."""
    tok = smollm2_tokenizer()
    if not chat_template:
        tok = Tokenizer([f for f in tok.fields if f[0] != "tokenizer.chat_template"], tok.n_vocab)
    w = writer(out, "llama", tok)
    _common_kv(w, "llama", LLAMA_LAYERS, tok)
    W = F16Weights(1234)
    w.add_tensor("token_embd.weight", _embd(W, tok.n_vocab))
    w.add_tensor("output_norm.weight", W.ones(N_EMBD))
    for i in range(LLAMA_LAYERS):
        _attn(w, W, i)
        _dense_ffn(w, W, i)
    finish(w)


DFLASH_BLOCK = 16  # drafts up to block - 1 = 15 tokens: covers n-max 3, 7, 12


def build_llama_dflash(out: Path) -> None:
    tok = smollm2_tokenizer()
    w = writer(out, "dflash", tok)
    _common_kv(w, "dflash", 1, tok)
    target_layers = list(range(LLAMA_LAYERS))
    w.add_array("dflash.target_layers", target_layers)
    w.add_uint32("dflash.block_size", DFLASH_BLOCK)
    # The mask token fills the block's undecided positions; any id of the
    # shared vocabulary works for random weights: use <|endoftext|>.
    w.add_uint32("tokenizer.ggml.mask_token_id", 0)
    W = F16Weights(4321)
    w.add_tensor("fc.weight", W.mat(N_EMBD, N_EMBD * len(target_layers)))
    w.add_tensor("enc.output_norm.weight", W.ones(N_EMBD))
    w.add_tensor("output_norm.weight", W.ones(N_EMBD))
    _attn(w, W, 0, qk_norm=True)
    _dense_ffn(w, W, 0)
    finish(w)


GLM_TRUNK = 2
GLM_EXPERTS = 4
GLM_EXPERTS_USED = 2
GLM_FF_EXP = 32


def _moe_ffn(w: Any, W: F16Weights, i: int) -> None:
    w.add_tensor(f"blk.{i}.post_attention_norm.weight", W.ones(N_EMBD))
    w.add_tensor(f"blk.{i}.ffn_gate_inp.weight", W.mat(GLM_EXPERTS, N_EMBD).astype(np.float32))
    w.add_tensor(f"blk.{i}.exp_probs_b.bias", np.zeros(GLM_EXPERTS, dtype=np.float32))
    w.add_tensor(f"blk.{i}.ffn_gate_exps.weight", W.mat(GLM_EXPERTS, GLM_FF_EXP, N_EMBD))
    w.add_tensor(f"blk.{i}.ffn_up_exps.weight", W.mat(GLM_EXPERTS, GLM_FF_EXP, N_EMBD))
    w.add_tensor(f"blk.{i}.ffn_down_exps.weight", W.mat(GLM_EXPERTS, N_EMBD, GLM_FF_EXP, scale=OUT_SCALE))
    w.add_tensor(f"blk.{i}.ffn_gate_shexp.weight", W.mat(GLM_FF_EXP, N_EMBD))
    w.add_tensor(f"blk.{i}.ffn_up_shexp.weight", W.mat(GLM_FF_EXP, N_EMBD))
    w.add_tensor(f"blk.{i}.ffn_down_shexp.weight", W.mat(N_EMBD, GLM_FF_EXP, scale=OUT_SCALE))


def build_glm4moe_mtp(out: Path) -> None:
    tok = smollm2_tokenizer()
    arch = "glm4moe"
    w = writer(out, arch, tok)
    n_all = GLM_TRUNK + 1
    _common_kv(w, arch, n_all, tok)
    w.add_uint32(f"{arch}.nextn_predict_layers", 1)
    w.add_uint32(f"{arch}.leading_dense_block_count", 1)
    w.add_uint32(f"{arch}.expert_feed_forward_length", GLM_FF_EXP)
    w.add_uint32(f"{arch}.expert_count", GLM_EXPERTS)
    w.add_uint32(f"{arch}.expert_used_count", GLM_EXPERTS_USED)
    w.add_uint32(f"{arch}.expert_shared_count", 1)
    w.add_float32(f"{arch}.expert_weights_scale", 1.0)
    w.add_bool(f"{arch}.expert_weights_norm", True)
    w.add_uint32(f"{arch}.expert_gating_func", 2)  # sigmoid, as GLM-4.5
    W = F16Weights(2468)
    w.add_tensor("token_embd.weight", _embd(W, tok.n_vocab))
    w.add_tensor("output_norm.weight", W.ones(N_EMBD))
    for i in range(n_all):
        _attn(w, W, i)
        if i == 0:
            _dense_ffn(w, W, i, norm="post_attention_norm")
        else:
            _moe_ffn(w, W, i)
    nextn = GLM_TRUNK
    w.add_tensor(f"blk.{nextn}.nextn.eh_proj.weight", W.mat(N_EMBD, 2 * N_EMBD))
    w.add_tensor(f"blk.{nextn}.nextn.enorm.weight", W.ones(N_EMBD))
    w.add_tensor(f"blk.{nextn}.nextn.hnorm.weight", W.ones(N_EMBD))
    w.add_tensor(f"blk.{nextn}.nextn.shared_head_norm.weight", W.ones(N_EMBD))
    finish(w)
