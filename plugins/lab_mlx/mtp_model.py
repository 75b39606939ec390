"""The MTP (nextn) head a GGUF appends after its last layer, as an MLX
drafter fed as llama.cpp's graph feeds it; :mod:`lab_mlx.mtp_backend` mounts
it on a target."""

from __future__ import annotations

from typing import Any, Callable, Mapping

# GGUF tensor suffix (under blk.N.) -> the head's parameter path.
TENSORS: Mapping[str, str] = {
    "nextn.eh_proj.weight": "eh_proj.weight",
    "nextn.enorm.weight": "enorm.weight",
    "nextn.hnorm.weight": "hnorm.weight",
    "nextn.shared_head_norm.weight": "shared_head_norm.weight",
    "attn_norm.weight": "block.input_layernorm.weight",
    "attn_q.weight": "block.self_attn.q_proj.weight",
    "attn_k.weight": "block.self_attn.k_proj.weight",
    "attn_v.weight": "block.self_attn.v_proj.weight",
    "attn_output.weight": "block.self_attn.o_proj.weight",
    "ffn_norm.weight": "block.post_attention_layernorm.weight",
    "ffn_gate.weight": "block.mlp.gate_proj.weight",
    "ffn_up.weight": "block.mlp.up_proj.weight",
    "ffn_down.weight": "block.mlp.down_proj.weight",
}


def make_head(args: Any) -> Any:
    """An MTP head for a llama-type target with mlx-lm ModelArgs ``args``."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx_lm.models.llama import TransformerBlock

    d = args.hidden_size

    class MtpHead(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.enorm = nn.RMSNorm(d, eps=args.rms_norm_eps)
            self.hnorm = nn.RMSNorm(d, eps=args.rms_norm_eps)
            self.eh_proj = nn.Linear(2 * d, d, bias=False)
            self.block = TransformerBlock(args)
            self.shared_head_norm = nn.RMSNorm(d, eps=args.rms_norm_eps)

        def __call__(self, emb: Any, h: Any, cache: Any = None) -> tuple[Any, Any]:
            """(B, L, d) embeddings and hidden states -> the block's output
            (the next step's h) and the normed state the LM head reads."""
            x = self.eh_proj(mx.concatenate([self.enorm(emb), self.hnorm(h)], axis=-1))
            mask: Any = "causal" if x.shape[1] > 1 else None
            out = self.block(x, mask, cache)
            return out, self.shared_head_norm(out)

    return MtpHead()


def load_head(args: Any, weights: Mapping[str, Any], layer: int) -> Any:
    """The head from GGUF-named ``weights`` (as mx.load gives them) of
    block ``layer``; a missing tensor is named."""
    head = make_head(args)
    prefix = f"blk.{layer}."
    missing = [prefix + k for k in TENSORS if prefix + k not in weights]
    if missing:
        raise ValueError(f"MTP block {layer}: missing tensors {', '.join(missing)}")
    head.load_weights([(TENSORS[k], weights[prefix + k]) for k in TENSORS])
    return head


# GGUF tensor part (under blk.N., before .weight / .scales / .biases) of a
# qwen35 nextn block -> the qwen35 head's module path.
QWEN35_TENSORS: Mapping[str, str] = {
    "nextn.eh_proj": "eh_proj",
    "nextn.enorm": "enorm",
    "nextn.hnorm": "hnorm",
    "nextn.shared_head_norm": "shared_head_norm",
    "attn_norm": "block.input_layernorm",
    "post_attention_norm": "block.post_attention_layernorm",
    "attn_q": "block.self_attn.q_proj",
    "attn_k": "block.self_attn.k_proj",
    "attn_v": "block.self_attn.v_proj",
    "attn_output": "block.self_attn.o_proj",
    "attn_q_norm": "block.self_attn.q_norm",
    "attn_k_norm": "block.self_attn.k_norm",
    "ffn_gate": "block.mlp.gate_proj",
    "ffn_up": "block.mlp.up_proj",
    "ffn_down": "block.mlp.down_proj",
}
# A block's own embedding or LM head replaces the target's in llama.cpp;
# this head shares the target's only.
_OWN_TABLES = ("nextn.embed_tokens", "nextn.shared_head_head")


def make_qwen35_head(text_args: Any) -> Any:
    """An MTP head for a qwen3_5 target whose mlx-lm TextModelArgs are ``text_args``."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx_lm.models.qwen3_5 import DecoderLayer

    d, eps = text_args.hidden_size, text_args.rms_norm_eps

    class Qwen35MtpHead(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.enorm = nn.RMSNorm(d, eps=eps)
            self.hnorm = nn.RMSNorm(d, eps=eps)
            self.eh_proj = nn.Linear(2 * d, d, bias=False)
            # The layer index picks the layer type: full attention.
            self.block = DecoderLayer(text_args, text_args.full_attention_interval - 1)
            self.shared_head_norm = nn.RMSNorm(d, eps=eps)

        def __call__(self, emb: Any, h: Any, cache: Any = None) -> tuple[Any, Any]:
            """(B, L, d) embeddings and normed hidden states -> the next
            step's h and the state the LM head reads: both the block's
            output after shared_head_norm, as llama.cpp chains them."""
            x = self.eh_proj(mx.concatenate([self.enorm(emb), self.hnorm(h)], axis=-1))
            mask: Any = "causal" if x.shape[1] > 1 else None
            normed = self.shared_head_norm(self.block(x, mask, cache))
            return normed, normed

    return Qwen35MtpHead()


def load_qwen35_head(text_args: Any, weights: Mapping[str, Any], layer: int) -> Any:
    """The qwen35 head from the GGUF tensors of block ``layer`` (as mx.load
    gives them, quantized or not); a missing or unsupported tensor is named."""
    import mlx.nn as nn

    prefix = f"blk.{layer}."
    missing = [f"{prefix}{k}.weight" for k in QWEN35_TENSORS if f"{prefix}{k}.weight" not in weights]
    if missing:
        raise ValueError(f"MTP block {layer}: missing tensors {', '.join(missing)}")
    own = [f"{prefix}{k}.weight" for k in _OWN_TABLES if f"{prefix}{k}.weight" in weights]
    if own:
        raise ValueError(f"MTP block {layer}: its own {', '.join(own)} is not supported (the head shares the target's)")
    params: dict[str, Any] = {}
    for part, path in QWEN35_TENSORS.items():
        for kind in ("weight", "scales", "biases"):
            if f"{prefix}{part}.{kind}" in weights:
                params[f"{path}.{kind}"] = weights[f"{prefix}{part}.{kind}"]
    head = make_qwen35_head(text_args)

    def quantized(path: str, m: Any) -> Any:
        scales = params.get(f"{path}.scales")
        if scales is None or not hasattr(m, "to_quantized"):
            return False
        return {"group_size": 32, "bits": int(params[f"{path}.weight"].shape[-1] * 32 // (scales.shape[-1] * 32))}

    nn.quantize(head, class_predicate=quantized)
    head.load_weights(list(params.items()), strict=True)
    return head


def draft(head: Any, embed: Callable[[Any], Any], lm_head: Callable[[Any], Any], last: int, h: Any, k: int,
          cache: Any = None) -> list[int]:
    """k greedy drafted tokens after ``last`` from the target's hidden state
    ``h`` (1, 1, d) before its final norm."""
    import mlx.core as mx

    tokens: list[int] = []
    tok = last
    for _ in range(k):
        out, normed = head(embed(mx.array([[tok]])), h, cache)
        tok = int(mx.argmax(lm_head(normed)[0, -1]).tolist())  # type: ignore[arg-type]
        tokens.append(tok)
        h = out
    return tokens
