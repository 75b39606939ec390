"""GGUF on MLX: weights through ``mx.load`` (Q4_0 / Q4_1 / Q8_0 become MLX
affine-quantized arrays with group size 32, so no dequantization), the
tokenizer rebuilt from the GGUF's own metadata. This is what lets the same
file run on llama.cpp and MLX and be compared across stacks.

Supports the ``llama`` architecture (SmolLM2 and other Llama-style models)
and llama.cpp's ``qwen35`` hybrid (see lab_mlx.gguf_qwen35); byte-level BPE
and SentencePiece vocabularies (see lab_mlx.gguf_spm)."""

from __future__ import annotations

import re
from typing import Any

from lab_mlx.vocab import Vocab

# llama.cpp pre-tokenizer names -> split regexes applied before byte-level BPE
# (llama.cpp's llama-vocab.cpp lists the same expressions).
_GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_DIGIT_FIRST = {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"}

# GGUF token types that are control / user-defined tokens.
_SPECIAL_TYPES = {3, 4}

_LAYER_MAP = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_TOP_MAP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}


def _scalar(md: dict[str, Any], key: str, default: Any = None) -> Any:
    if key not in md:
        return default
    v = md[key]
    if hasattr(v, "item"):
        return v.item()
    return v


def _mlx_name(name: str) -> str:
    m = re.match(r"^blk\.(\d+)\.([a-z_]+)\.(weight|scales|biases|bias)$", name)
    if m:
        layer, part, kind = m.groups()
        if part not in _LAYER_MAP:
            raise ValueError(f"GGUF tensor {name}: no MLX counterpart for {part!r}")
        return f"model.layers.{layer}.{_LAYER_MAP[part]}.{kind}"
    m = re.match(r"^([a-z_]+)\.(weight|scales|biases)$", name)
    if m and m.group(1) in _TOP_MAP:
        return f"{_TOP_MAP[m.group(1)]}.{m.group(2)}"
    raise ValueError(f"GGUF tensor {name}: no MLX counterpart")


def load_gguf(path: str, keep_nextn: bool = False) -> tuple[Any, Vocab, dict[str, Any], dict[str, Any]]:
    """Model, vocabulary, a config summary and, with ``keep_nextn``, the
    tensors of the file's nextn (MTP) blocks, for a GGUF file."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx_lm.models import llama

    # mx.load's declared return type is a union over file formats.
    loaded: Any = mx.load(path, return_metadata=True)
    raw: dict[str, Any] = loaded[0]
    md: dict[str, Any] = loaded[1]
    arch = _scalar(md, "general.architecture")
    if arch == "qwen35":
        return _load_qwen35(raw, md, keep_nextn)
    if arch != "llama":
        raise ValueError(f"{path}: GGUF architecture {arch!r} is not supported on MLX (llama, qwen35)")
    tokens = list(md["tokenizer.ggml.tokens"])
    n_heads = int(_scalar(md, "llama.attention.head_count"))
    hidden = int(_scalar(md, "llama.embedding_length"))
    head_dim = int(_scalar(md, "llama.rope.dimension_count", hidden // n_heads))
    weights = {_mlx_name(k): v for k, v in raw.items()}
    tied = "lm_head.weight" not in weights
    args = llama.ModelArgs(
        model_type="llama",
        hidden_size=hidden,
        num_hidden_layers=int(_scalar(md, "llama.block_count")),
        intermediate_size=int(_scalar(md, "llama.feed_forward_length")),
        num_attention_heads=n_heads,
        num_key_value_heads=int(_scalar(md, "llama.attention.head_count_kv", n_heads)),
        rms_norm_eps=float(_scalar(md, "llama.attention.layer_norm_rms_epsilon", 1e-5)),
        vocab_size=int(_scalar(md, "llama.vocab_size", len(tokens))),
        head_dim=head_dim,
        max_position_embeddings=int(_scalar(md, "llama.context_length", 4096)),
        rope_theta=float(_scalar(md, "llama.rope.freq_base", 10000.0)),
        # convert_hf_to_gguf permutes Q/K rows for llama.cpp's interleaved
        # (NORM) rope, which is MLX's traditional rope.
        rope_traditional=True,
        tie_word_embeddings=tied,
    )
    model = llama.Model(args)

    def quantized(p: str, m: Any) -> Any:
        scales = weights.get(f"{p}.scales")
        if scales is None or not hasattr(m, "to_quantized"):
            return False
        in_dim = scales.shape[-1] * 32
        bits = weights[f"{p}.weight"].shape[-1] * 32 // in_dim
        return {"group_size": 32, "bits": bits}

    nn.quantize(model, class_predicate=quantized)
    model.load_weights(list(weights.items()))
    mx.eval(model.parameters())
    model.eval()
    vocab = Vocab(_tokenizer(md, tokens), args.vocab_size, add_bos=bool(_scalar(md, "tokenizer.ggml.add_bos_token", True)))
    config = {"model_type": "llama", "format": "gguf", "file_type": _scalar(md, "general.file_type"), "tied": tied}
    return model, vocab, config, {}


def _load_qwen35(raw: dict[str, Any], md: dict[str, Any],
                 keep_nextn: bool) -> tuple[Any, Vocab, dict[str, Any], dict[str, Any]]:
    from lab_mlx.gguf_qwen35 import build_model, nextn_tensors

    tokens = list(md["tokenizer.ggml.tokens"])
    model, cfg = build_model(raw, md, len(tokens))
    add_bos = bool(_scalar(md, "tokenizer.ggml.add_bos_token", True))
    vocab = Vocab(_tokenizer(md, tokens), int(cfg["vocab_size"]), add_bos=add_bos)
    config = {"model_type": "qwen3_5", "format": "gguf", "file_type": _scalar(md, "general.file_type"),
              "tied": cfg["tie_word_embeddings"], "nextn_layers": cfg["n_nextn"]}
    return model, vocab, config, nextn_tensors(raw, md) if keep_nextn else {}


def _tokenizer(md: dict[str, Any], tokens: list[str]) -> Any:
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    from lab_mlx.gguf_spm import fast_tokenizer, spm_tokenizer

    def named(key: str) -> str | None:
        i = _scalar(md, key)
        return tokens[int(i)] if i is not None and 0 <= int(i) < len(tokens) else None

    kind = _scalar(md, "tokenizer.ggml.model")
    if kind == "llama":
        return spm_tokenizer(md, tokens, named)
    if kind != "gpt2":
        raise ValueError(f"GGUF tokenizer model {kind!r} is not supported on MLX (byte-level BPE or SentencePiece)")
    merges = [tuple(m.split(" ", 1)) for m in md.get("tokenizer.ggml.merges", [])]
    bpe = models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges, fuse_unk=False)
    tok = Tokenizer(bpe)
    split = pre_tokenizers.Split(Regex(_GPT2_SPLIT), behavior="isolated")
    steps = [split, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    if _scalar(md, "tokenizer.ggml.pre", "default") in _DIGIT_FIRST:
        steps.insert(0, pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(steps)
    tok.decoder = decoders.ByteLevel()
    types = list(md.get("tokenizer.ggml.token_type", []))
    specials = [AddedToken(tokens[i], special=True, normalized=False) for i, t in enumerate(types) if int(t) in _SPECIAL_TYPES]
    tok.add_special_tokens(specials)
    return fast_tokenizer(tok, md, named)
