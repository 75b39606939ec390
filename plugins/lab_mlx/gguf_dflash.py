"""DFlash drafts in llama.cpp's GGUF (architecture ``dflash``: what
``--spec-type draft-dflash`` loads, and what lab_llamacpp.hybrid writes) as
the MLX :class:`lab_mlx.dflash_model.DFlashDraft`, so one pair of files runs
on llama-server and on MLX.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

from lab_mlx.dflash_model import DFlashDraft, DFlashSpec, _quantize_layers
from lab_mlx.gguf import _scalar
from lab_mlx.gguf_qwen35 import ATTENTION, COMMON, _quantize

ARCH = "dflash"

# GGUF tensor (no suffix) -> DFlashDraft parameter path (no suffix).
TOP = {"fc": "fc", "enc.output_norm": "hidden_norm", "output_norm": "norm"}
# a draft layer is a plain attention block under the qwen35 target's names
LAYER = {
    **ATTENTION,
    **{k: v for k, v in COMMON.items() if k != "post_attention_norm"},
    "ffn_norm": "post_attention_layernorm",
}
# Tensors llama.cpp knows for a dflash draft that change what it computes.
_REFUSED = (
    (re.compile(r"^(selector_|blk\.\d+\.(attn|ffn)_conv_)"), "DFlash 2's candidate selector and block convolutions"),
    (re.compile(r"^(markov_|conf_proj)"), "DSpark's Markov and confidence heads"),
    (re.compile(r"^(token_embd|output|d2t)\."), "the draft's own embeddings or output head (this draft borrows the target's)"),
    (re.compile(r"^blk\.\d+\.(post_attention_norm|post_ffw_norm|attn_post_norm|ffn_post_norm)\."), "post-sublayer norms"),
    (re.compile(r"^blk\.\d+\.(attn_sinks|layer_output_scale|rope_freqs)"), "attention sinks, layer output scales or rope factors"),
    (re.compile(r"^fc\.scale$"), "a scaled fc projection"),
)

_LAYER_RE = re.compile(r"^blk\.(\d+)\.([a-z0-9_]+)\.(weight|scales|biases)$")
_TOP_RE = re.compile(r"^([a-z_.]+)\.(weight|scales|biases)$")


def _need(md: dict[str, Any], key: str) -> Any:
    value = _scalar(md, key)
    if value is None:
        raise ValueError(f"DFlash GGUF: metadata {key} is missing")
    return value


def _ints(md: Mapping[str, Any], key: str) -> list[int]:
    value = md.get(key)
    if value is None:
        return []
    return [int(x) for x in (value.tolist() if hasattr(value, "tolist") else list(value))]


def read_spec(md: dict[str, Any]) -> DFlashSpec:
    """The draft's shape and llama.cpp's settings from GGUF metadata (as
    ``mx.load(..., return_metadata=True)`` gives it)."""
    arch = md.get("general.architecture")
    if arch != ARCH:
        raise ValueError(f"GGUF architecture {arch!r} is not a DFlash draft ({ARCH})")
    a = ARCH
    refused = [
        (f"{a}.hyper_connection.count", "DSpark's DeepSeek-V4 stages"),
        (f"{a}.attention.sliding_window", "sliding-window attention"),
        (f"{a}.attention.value_scale", "a scaled attention output"),
        (f"{a}.selector_rank", "DFlash 2's candidate selector"),
    ]
    for key, what in refused:
        if _scalar(md, key, 0):
            raise ValueError(f"DFlash GGUF: {key} asks for {what}, which the MLX draft does not have")
    act = _scalar(md, f"{a}.hidden_activation", "silu")
    if act != "silu":
        raise ValueError(f"DFlash GGUF: hidden activation {act!r}; the MLX draft's FFN is SwiGLU (silu)")
    scaling = _scalar(md, f"{a}.rope.scaling.type", "none")
    if scaling not in ("none", "", None):
        raise ValueError(f"DFlash GGUF: rope scaling {scaling!r} is not supported on MLX")
    sections = _ints(md, f"{a}.rope.dimension_sections")
    if len(sections) > 3 and sections[3]:
        # The first three position streams are all the token's position for
        # text, so M-RoPE is NeoX rope; the fourth is 0 in llama.cpp's batches.
        raise ValueError(f"DFlash GGUF: rope sections {sections} use the fourth position stream")
    head_dim = int(_need(md, f"{a}.attention.key_length"))
    if int(_scalar(md, f"{a}.attention.value_length", head_dim)) != head_dim:
        raise ValueError("DFlash GGUF: key and value head sizes differ (llama.cpp's dflash graph requires them equal)")
    n_head = int(_need(md, f"{a}.attention.head_count"))
    layers = _ints(md, f"{a}.target_layers")
    if not layers:
        raise ValueError(f"DFlash GGUF: metadata {a}.target_layers is missing (llama.cpp requires it)")
    mask = _scalar(md, "tokenizer.ggml.mask_token_id")
    if mask is None:
        raise ValueError("DFlash GGUF: tokenizer.ggml.mask_token_id is missing: the block has no mask token")
    tokens = md.get("tokenizer.ggml.tokens")
    n_vocab = len(tokens) if tokens is not None else int(_need(md, f"{a}.vocab_size"))
    softcap = float(_scalar(md, f"{a}.final_logit_softcapping", 0.0))
    return DFlashSpec(
        version=1,
        hidden_size=int(_need(md, f"{a}.embedding_length")),
        num_hidden_layers=int(_need(md, f"{a}.block_count")),
        num_attention_heads=n_head,
        num_key_value_heads=int(_scalar(md, f"{a}.attention.head_count_kv", n_head)),
        head_dim=head_dim,
        intermediate_size=int(_need(md, f"{a}.feed_forward_length")),
        vocab_size=n_vocab,
        rms_norm_eps=float(_need(md, f"{a}.attention.layer_norm_rms_epsilon")),
        rope_theta=float(_scalar(md, f"{a}.rope.freq_base", 10000.0)),
        rope_scaling=None,
        max_position_embeddings=int(_scalar(md, f"{a}.context_length", 32768)),
        block_size=int(_scalar(md, f"{a}.block_size", 16)),
        target_layer_ids=tuple(layers),
        mask_token_id=int(mask),
        causal=bool(_scalar(md, f"{a}.attention.causal", False)),
        input_embedding_scale=float(_scalar(md, f"{a}.embedding_scale", 0.0)) or 1.0,
        output_multiplier=float(_scalar(md, f"{a}.logit_scale", 0.0)) or 1.0,
        final_logit_softcapping=softcap if softcap > 0 else None,
        conv_kernel_size=0,
        conv_group_size=0,
        selector_rank=0,
        selector_top_k=0,
        rope_dims=int(_scalar(md, f"{a}.rope.dimension_count", head_dim)),
        attention_scale=float(_scalar(md, f"{a}.attention.scale", 0.0)),
        target_layer_inputs=True,
        target_embedding_scale=False,
    )


def parameter_name(name: str) -> str:
    """DFlashDraft parameter path of GGUF tensor ``name`` (with its
    ``weight`` / ``scales`` / ``biases`` suffix); a tensor without a
    counterpart is an error that says what llama.cpp would do with it."""
    for pattern, what in _REFUSED:
        if pattern.match(name):
            raise ValueError(f"DFlash GGUF tensor {name}: {what} is not supported on MLX")
    m = _LAYER_RE.match(name)
    if m and m.group(2) in LAYER:
        return f"layers.{int(m.group(1))}.{LAYER[m.group(2)]}.{m.group(3)}"
    t = _TOP_RE.match(name)
    if t and t.group(1) in TOP:
        return f"{TOP[t.group(1)]}.{t.group(2)}"
    raise ValueError(f"DFlash GGUF tensor {name}: no MLX counterpart")


def map_weights(raw: Mapping[str, Any]) -> dict[str, Any]:
    """DFlashDraft parameters from the GGUF's tensors, as they are (the
    norms carry no offset in either stack)."""
    return {parameter_name(name): arr for name, arr in raw.items()}


def build_draft(raw: Mapping[str, Any], md: dict[str, Any]) -> DFlashDraft:
    """The draft from GGUF tensors and metadata as ``mx.load`` gives them;
    a tensor left over or a parameter left unfilled is an error."""
    from mlx.utils import tree_flatten

    spec = read_spec(md)
    weights = map_weights(raw)
    draft = DFlashDraft(spec)
    _quantize(draft, weights)
    flat: Any = tree_flatten(draft.parameters())
    wanted = {k for k, _ in flat}
    missing = sorted(wanted - set(weights))
    if missing:
        raise ValueError(f"the DFlash GGUF lacks tensors for {', '.join(missing)} (llama.cpp requires them too)")
    draft.load_weights(list(weights.items()), strict=True)
    return draft


def load_gguf_draft(path: Path, bits: int | None = None, group_size: int = 64) -> DFlashDraft:
    """The draft in a DFlash GGUF file; ``bits`` quantizes the layers stored
    in float (the Q4_0 ones stay as stored)."""
    import mlx.core as mx

    from lab.kit.model_files import check_gguf

    check_gguf(path)
    loaded: Any = mx.load(str(path), return_metadata=True)
    try:
        draft = build_draft(loaded[0], loaded[1])
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    if bits:
        _quantize_layers(draft, bits, group_size)
    mx.eval(draft.parameters())
    draft.eval()
    return draft
