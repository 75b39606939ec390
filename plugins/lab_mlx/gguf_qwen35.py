"""llama.cpp's ``qwen35`` GGUF (the Qwen3.5 / 3.6 dense hybrid: gated
delta-net layers with full attention every ``full_attention_interval``-th
layer, plus appended MTP ``nextn`` blocks) as mlx-lm's ``qwen3_5`` model
(docs/design-notes.md maps the tensors)."""

from __future__ import annotations

import re
from typing import Any, Mapping

ARCHITECTURES = ("qwen35",)

# GGUF tensor part under blk.N. -> mlx-lm qwen3_5 path under the decoder layer.
COMMON = {
    "attn_norm": "input_layernorm",
    "post_attention_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
ATTENTION = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
}
DELTA_NET = {
    "attn_qkv": "linear_attn.in_proj_qkv",
    "attn_gate": "linear_attn.in_proj_z",
    "ssm_conv1d": "linear_attn.conv1d",
    "ssm_dt": "linear_attn.dt_bias",
    "ssm_a": "linear_attn.A_log",
    "ssm_beta": "linear_attn.in_proj_b",
    "ssm_alpha": "linear_attn.in_proj_a",
    "ssm_norm": "linear_attn.norm",
    "ssm_out": "linear_attn.out_proj",
}
# Parameters that are bare arrays in mlx-lm, not a module's ``weight``.
_BARE = {"ssm_dt": "bias", "ssm_a": ""}
TOP = {"token_embd": "embed_tokens", "output_norm": "norm", "output": "lm_head"}
NEXTN = ("nextn.eh_proj", "nextn.enorm", "nextn.hnorm", "nextn.shared_head_norm",
         "nextn.embed_tokens", "nextn.shared_head_head")

GROUP = 32  # MLX's group size for GGUF's Q4_0 / Q4_1 / Q8_0 blocks

_LAYER = re.compile(r"^blk\.(\d+)\.([a-z0-9_.]+?)(?:\.(weight|scales|biases|bias))?$")
_TOP = re.compile(r"^([a-z_]+)\.(weight|scales|biases)$")


def _scalar(md: Mapping[str, Any], key: str, default: Any = None) -> Any:
    if key not in md:
        if default is None:
            raise ValueError(f"qwen35 GGUF: metadata {key} is missing")
        return default
    v = md[key]
    return v.item() if hasattr(v, "item") else v


def text_config(md: Mapping[str, Any], n_tokens: int) -> dict[str, Any]:
    """mlx-lm ``qwen3_5`` text config from the GGUF's metadata (trunk layers
    only: the nextn blocks are not part of the decoder stack)."""
    a = "qwen35"
    n_head = int(_scalar(md, f"{a}.attention.head_count"))
    head_dim = int(_scalar(md, f"{a}.attention.key_length"))
    if int(_scalar(md, f"{a}.attention.value_length", head_dim)) != head_dim:
        raise ValueError("qwen35 GGUF: key and value head sizes differ; mlx-lm's qwen3_5 needs them equal")
    n_all = int(_scalar(md, f"{a}.block_count"))
    n_nextn = int(_scalar(md, f"{a}.nextn_predict_layers", 0))
    n_layer = n_all - n_nextn
    interval = int(_scalar(md, f"{a}.full_attention_interval", 4))
    recurrent = md.get(f"{a}.attention.recurrent_layers")
    if recurrent is not None:
        # mlx-lm places full attention by the interval only.
        want = [(i + 1) % interval != 0 for i in range(n_layer)]
        if [bool(x) for x in list(recurrent)[:n_layer]] != want:
            raise ValueError("qwen35 GGUF: its recurrent-layer pattern is not every "
                             f"{interval}th layer full attention, which mlx-lm's qwen3_5 assumes")
    v_heads = int(_scalar(md, f"{a}.ssm.time_step_rank"))
    n_rot = int(_scalar(md, f"{a}.rope.dimension_count", head_dim))
    sections = [int(x) for x in list(md.get(f"{a}.rope.dimension_sections", [n_rot // 2, 0, 0]))[:3]]
    return {
        "model_type": "qwen3_5",
        "hidden_size": int(_scalar(md, f"{a}.embedding_length")),
        "intermediate_size": int(_scalar(md, f"{a}.feed_forward_length")),
        "num_hidden_layers": n_layer,
        "num_attention_heads": n_head,
        "num_key_value_heads": int(_scalar(md, f"{a}.attention.head_count_kv", n_head)),
        "head_dim": head_dim,
        "vocab_size": int(_scalar(md, f"{a}.vocab_size", n_tokens)),
        "rms_norm_eps": float(_scalar(md, f"{a}.attention.layer_norm_rms_epsilon", 1e-6)),
        "linear_num_value_heads": v_heads,
        "linear_num_key_heads": int(_scalar(md, f"{a}.ssm.group_count")),
        "linear_key_head_dim": int(_scalar(md, f"{a}.ssm.state_size")),
        "linear_value_head_dim": int(_scalar(md, f"{a}.ssm.inner_size")) // v_heads,
        "linear_conv_kernel_dim": int(_scalar(md, f"{a}.ssm.conv_kernel", 4)),
        "full_attention_interval": interval,
        "max_position_embeddings": int(_scalar(md, f"{a}.context_length", 262144)),
        "rope_parameters": {"type": "default", "rope_theta": float(_scalar(md, f"{a}.rope.freq_base", 1e7)),
                            "partial_rotary_factor": n_rot / head_dim, "mrope_section": sections},
        "n_nextn": n_nextn,
    }


def _grouped(arr: Any, axis: int, n_k: int, per_k: int, chunk: int) -> Any:
    """Value heads along ``axis`` (``chunk`` entries each) from ggml's tiled
    order back to mlx-lm's grouped order."""
    import mlx.core as mx

    axis %= arr.ndim
    shape = list(arr.shape)
    if shape[axis] != n_k * per_k * chunk:
        raise ValueError(f"value-head axis of {shape[axis]} is not {n_k} x {per_k} heads of {chunk}")
    split = shape[:axis] + [per_k, n_k, chunk] + shape[axis + 1:]
    return mx.swapaxes(arr.reshape(split), axis, axis + 1).reshape(shape)


def _untile(part: str, kind: str, arr: Any, cfg: Mapping[str, Any], bits: int | None) -> Any:
    """One delta-net tensor's value heads put in grouped order."""
    n_k, n_v = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    if n_k == n_v:
        return arr
    per_k, hv = n_v // n_k, cfg["linear_value_head_dim"]
    # Units per input column along the last axis: packed words hold 32 // bits
    # weights, scales and biases one entry per group.
    if part == "ssm_out":
        if bits is None:
            return _grouped(arr, -1, n_k, per_k, hv)
        if hv % GROUP:
            raise ValueError(f"qwen35 GGUF: quantized ssm_out needs value heads of whole {GROUP}-groups, not {hv}")
        return _grouped(arr, -1, n_k, per_k, hv * bits // 32 if kind == "weight" else hv // GROUP)
    if part in ("attn_qkv", "ssm_conv1d"):
        import mlx.core as mx

        qk = 2 * cfg["linear_num_key_heads"] * cfg["linear_key_head_dim"]
        return mx.concatenate([arr[:qk], _grouped(arr[qk:], 0, n_k, per_k, hv)], axis=0)
    if part == "attn_gate":
        return _grouped(arr, 0, n_k, per_k, hv)
    if part in ("ssm_alpha", "ssm_beta", "ssm_a", "ssm_dt"):
        return _grouped(arr, 0, n_k, per_k, 1)
    return arr


def _bits(raw: Mapping[str, Any], name: str) -> int | None:
    base = name.rsplit(".", 1)[0]
    scales = raw.get(base + ".scales")
    if scales is None:
        return None
    return int(raw[base + ".weight"].shape[-1] * 32 // (scales.shape[-1] * GROUP))


def layer_path(part: str, kind: str, recurrent: bool) -> str:
    """mlx-lm path (under the decoder layer) of GGUF tensor part ``part``
    and suffix ``kind`` of a trunk layer."""
    table = DELTA_NET if recurrent else ATTENTION
    if part in COMMON:
        base = COMMON[part]
    elif part in table:
        base = table[part]
    else:
        kind_name = "delta-net" if recurrent else "full-attention"
        raise ValueError(f"qwen35 GGUF: no MLX counterpart for {part!r} in a {kind_name} layer")
    if part in _BARE:
        return base
    return f"{base}.{kind}"


def map_weights(raw: Mapping[str, Any], cfg: Mapping[str, Any]) -> dict[str, Any]:
    """mlx-lm ``qwen3_5`` parameters (under ``language_model``) from GGUF
    tensors as mx.load gives them; the nextn blocks' are left out
    (:func:`nextn_weights`), any other without a counterpart is an error."""
    import mlx.core as mx

    n_layer, interval = cfg["num_hidden_layers"], cfg["full_attention_interval"]
    out: dict[str, Any] = {}
    for name, arr in raw.items():
        m = _LAYER.match(name)
        if m:
            il, part, kind = int(m.group(1)), m.group(2), m.group(3) or ""
            if il >= n_layer:
                continue  # an MTP block
            recurrent = (il + 1) % interval != 0
            value = arr
            if recurrent:
                value = _untile(part, kind, arr, cfg, _bits(raw, name) if kind in ("weight", "scales", "biases") else None)
                if part == "ssm_a":
                    value = mx.log(-value.astype(mx.float32))
                elif part == "ssm_conv1d":
                    value = value[:, :, None]
            out[f"model.layers.{il}.{layer_path(part, kind, recurrent)}"] = value
            continue
        t = _TOP.match(name)
        if t and t.group(1) in TOP:
            prefix = "" if t.group(1) == "output" else "model."
            out[f"{prefix}{TOP[t.group(1)]}.{t.group(2)}"] = arr
            continue
        raise ValueError(f"qwen35 GGUF tensor {name}: no MLX counterpart")
    return out


def nextn_tensors(raw: Mapping[str, Any], md: Mapping[str, Any]) -> dict[str, Any]:
    """The tensors of every nextn block (the blocks past the trunk's), under
    their GGUF names."""
    a = "qwen35"
    first = int(_scalar(md, f"{a}.block_count")) - int(_scalar(md, f"{a}.nextn_predict_layers", 0))
    return {k: v for k, v in raw.items() if k.startswith("blk.") and int(k.split(".")[1]) >= first}


def nextn_weights(raw: Mapping[str, Any], layer: int) -> dict[str, Any]:
    """The GGUF tensors of nextn block ``layer``, names relative to it."""
    prefix = f"blk.{layer}."
    return {k[len(prefix):]: v for k, v in raw.items() if k.startswith(prefix)}


def _quantize(module: Any, weights: Mapping[str, Any]) -> None:
    """Turn the modules whose weights came quantized into MLX quantized
    modules of the bits the GGUF block type gives."""
    import mlx.nn as nn

    def predicate(path: str, m: Any) -> Any:
        scales = weights.get(f"{path}.scales")
        if scales is None or not hasattr(m, "to_quantized"):
            return False
        return {"group_size": GROUP, "bits": int(weights[f"{path}.weight"].shape[-1] * 32 // (scales.shape[-1] * GROUP))}

    nn.quantize(module, class_predicate=predicate)


def build_model(raw: Mapping[str, Any], md: Mapping[str, Any], n_tokens: int) -> tuple[Any, dict[str, Any]]:
    """mlx-lm's qwen3_5 Model with the GGUF's trunk weights, and its text config."""
    import mlx.core as mx
    from mlx_lm.models import qwen3_5

    cfg = text_config(md, n_tokens)
    weights = map_weights(raw, cfg)
    tied = "lm_head.weight" not in weights
    text = {k: v for k, v in cfg.items() if k != "n_nextn"}
    text["tie_word_embeddings"] = tied
    model = qwen3_5.Model(qwen3_5.ModelArgs.from_dict({"model_type": "qwen3_5", "text_config": text}))
    inner = model.language_model
    _quantize(inner, weights)
    inner.load_weights(list(weights.items()), strict=True)
    mx.eval(model.parameters())
    model.eval()
    cfg["tie_word_embeddings"] = tied
    return model, cfg
