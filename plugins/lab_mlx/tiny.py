"""Tiny MLX models the lab writes itself, with random weights, in the real
on-disk formats and read back through the real loaders: a byte-level
tokenizer, a qwen3 target, a smaller qwen3 draft model, and DFlash / DFlash 2
drafts for the target. Deterministic: weights come from fixed MLX keys."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>")
VOCAB = 256 + len(SPECIALS)
MASK_ID = 256 + SPECIALS.index("<|mask|>")
HIDDEN = 64
TARGET_LAYERS = 4
# Layers whose outputs the tiny DFlash drafts read (as z-lab drafts read a
# spread of the target's layers).
DFLASH_TARGET_LAYERS = [1, 3]

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def write_tokenizer(path: Path) -> None:
    """A byte-level BPE with no merges: one token per byte plus chat tokens."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from lab_mlx.vocab import _byte_decoder

    # Token id = byte value; the chat tokens follow at 256.
    vocab: dict[str, int] = dict(_byte_decoder())
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", chat_template=CHATML,
    )
    hf.save_pretrained(str(path))


def _randomize(module: Any, seed: int, scale: float = 1.0) -> None:
    """Replace every parameter with deterministic values: norms 1, matrices
    N(0, 1/fan_in) (times ``scale``), other arrays small."""
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_unflatten

    flat: Any = tree_flatten(module.parameters())
    new = []
    for i, (name, value) in enumerate(sorted(flat)):
        key = mx.random.key(seed * 1000 + i)
        if name.endswith("norm.weight"):
            arr = mx.ones(value.shape, dtype=mx.float32)
        elif value.ndim >= 2:
            # Depthwise conv weights are (channels, taps, 1): fan-in is taps.
            fan_in = value.shape[-1] if value.shape[-1] > 1 else value.shape[-2]
            arr = mx.random.normal(value.shape, key=key) * (scale / fan_in**0.5)
        else:
            arr = mx.random.normal(value.shape, key=key) * 0.02
        new.append((name, arr.astype(mx.float32)))
    module.update(tree_unflatten(new))
    mx.eval(module.parameters())


def _qwen3_config(layers: int, hidden: int) -> dict[str, Any]:
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "intermediate_size": hidden * 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": hidden // 4,
        "rms_norm_eps": 1e-6,
        "vocab_size": VOCAB,
        "max_position_embeddings": 4096,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        "eos_token_id": 256 + SPECIALS.index("<|im_end|>"),
        "torch_dtype": "float32",
    }


def _write_qwen3(out: Path, layers: int, seed: int) -> None:
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models import qwen3

    out.mkdir(parents=True)
    config = _qwen3_config(layers, HIDDEN)
    model = qwen3.Model(qwen3.ModelArgs.from_dict(config))
    # Weights scaled up so the logits are peaked: greedy picks then have
    # clear margins and do not flip on float noise between kernel paths.
    _randomize(model, seed, scale=4.0)
    mx.save_safetensors(str(out / "model.safetensors"), dict(tree_flatten(model.parameters())))
    (out / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    write_tokenizer(out)


def write_target(out: Path) -> None:
    _write_qwen3(out, TARGET_LAYERS, seed=1)


def write_draft_model(out: Path) -> None:
    _write_qwen3(out, 1, seed=2)


def write_hybrid_target(out: Path) -> None:
    """A Qwen3.5-style hybrid: GatedDeltaNet (recurrent, not trimmable)
    layers alternating with attention layers, same vocabulary and width as
    the qwen3 target so the tiny DFlash drafts fit it too."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models import qwen3_5

    out.mkdir(parents=True)
    text = {
        "model_type": "qwen3_5", "hidden_size": HIDDEN, "intermediate_size": HIDDEN * 2,
        "num_hidden_layers": TARGET_LAYERS, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "vocab_size": VOCAB, "rms_norm_eps": 1e-6, "linear_num_value_heads": 4, "linear_num_key_heads": 2,
        "linear_key_head_dim": 16, "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4,
        "tie_word_embeddings": True, "full_attention_interval": 2, "max_position_embeddings": 4096,
        "rope_parameters": {"type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5, "mrope_section": [2, 1, 1]},
        "eos_token_id": 256 + SPECIALS.index("<|im_end|>"),
    }
    config = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "text_config": text,
              "tie_word_embeddings": True, "eos_token_id": text["eos_token_id"]}
    model = qwen3_5.Model(qwen3_5.ModelArgs.from_dict(config))
    _randomize(model, seed=3, scale=4.0)
    mx.save_safetensors(str(out / "model.safetensors"), dict(tree_flatten(model.parameters())))
    (out / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    write_tokenizer(out)


def dflash_config(version: int, block_size: int = 4) -> dict[str, Any]:
    dcfg: dict[str, Any] = {"block_size": block_size, "target_layer_ids": DFLASH_TARGET_LAYERS, "mask_token_id": MASK_ID}
    if version == 2:
        dcfg.update({"conv_kernel_size": 3, "conv_group_size": 16, "selector_rank": 8, "selector_top_k": 4})
    return {
        "architectures": ["DFlash2DraftModel" if version == 2 else "DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": HIDDEN,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": HIDDEN // 4,
        "intermediate_size": HIDDEN * 2,
        "vocab_size": VOCAB,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "max_position_embeddings": 4096,
        "num_target_layers": TARGET_LAYERS,
        "block_size": block_size,
        # the draft reads the target's embedding and head; z-lab's configs say so
        # and dflash-mlx's loader requires the key
        "tie_word_embeddings": False,
        "dflash_config": dcfg,
    }


def _write_dflash(out: Path, version: int) -> None:
    from lab_mlx.dflash_model import DFlashDraft, read_spec, save_draft

    config = dflash_config(version)
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps(config), encoding="utf-8")
    draft = DFlashDraft(read_spec(out))
    _randomize(draft, seed=10 + version)
    save_draft(draft, out, config)


def write_dflash(out: Path) -> None:
    _write_dflash(out, 1)


def write_dflash2(out: Path) -> None:
    _write_dflash(out, 2)


def write_mtp(out: Path) -> None:
    """An MTP (nextn) block for tiny:qwen3, GGUF tensor names
    (blk.N.nextn.*, N = the target's layer count), in mtp.safetensors."""
    import mlx.core as mx

    out.mkdir(parents=True)
    c = _qwen3_config(TARGET_LAYERS, HIDDEN)
    d, ff, hd = c["hidden_size"], c["intermediate_size"], c["head_dim"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    shapes = {
        "nextn.eh_proj.weight": (d, 2 * d), "nextn.enorm.weight": (d,), "nextn.hnorm.weight": (d,),
        "nextn.shared_head_norm.weight": (d,), "attn_norm.weight": (d,), "attn_q.weight": (q, d),
        "attn_k.weight": (kv, d), "attn_v.weight": (kv, d), "attn_output.weight": (d, q), "ffn_norm.weight": (d,),
        "ffn_gate.weight": (ff, d), "ffn_up.weight": (ff, d), "ffn_down.weight": (d, ff),
    }
    key = mx.random.key(5)
    tensors = {}
    for name, shape in shapes.items():
        key, sub = mx.random.split(key)
        w = mx.ones(shape) if len(shape) == 1 else mx.random.normal(shape, key=sub) / shape[-1] ** 0.5
        tensors[f"blk.{TARGET_LAYERS}.{name}"] = w.astype(mx.float32)
    mx.save_safetensors(str(out / "mtp.safetensors"), tensors)
