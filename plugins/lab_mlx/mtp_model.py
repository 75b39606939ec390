"""The MTP (nextn) head as an MLX drafter: the block a GGUF appends after
its last layer (tensor names as llama.cpp loads them: ``nextn.eh_proj``,
``nextn.enorm``, ``nextn.hnorm``, ``nextn.shared_head_norm``, and the
block's own attention and MLP tensors).

One draft step: enorm(embed(token)) and hnorm(h), concatenated (embedding
half first), through eh_proj, one transformer block, shared_head_norm and
the target's LM head. ``h`` is the target's last hidden state before its
final norm for the first drafted token, the block's own output (before
shared_head_norm) for the next ones.

This module holds the head (a llama-type block); the decode loop that
mounts it on a target is not built yet."""

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
