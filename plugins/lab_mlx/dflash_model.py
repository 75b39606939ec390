"""DFlash and DFlash 2 block-diffusion drafts on MLX, from z-lab's checkpoint
format (``config.json`` with a ``dflash_config`` table, and safetensors) or
llama.cpp's GGUF (:mod:`lab_mlx.gguf_dflash`), written from the published
architecture; the tests compare tokens with z-lab's ``dflash`` package."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import KVCache


@dataclass(frozen=True)
class DFlashSpec:
    version: int  # 1 = DFlash, 2 = DFlash 2
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict[str, Any] | None
    max_position_embeddings: int
    block_size: int
    target_layer_ids: tuple[int, ...]
    mask_token_id: int
    causal: bool
    input_embedding_scale: float
    output_multiplier: float
    final_logit_softcapping: float | None
    conv_kernel_size: int
    conv_group_size: int
    selector_rank: int
    selector_top_k: int
    rope_dims: int = 0  # leading dimensions of a head that rotate (0: all)
    attention_scale: float = 0.0  # 0: 1 / sqrt(head_dim)
    # True: target_layer_ids name layer inputs (llama.cpp's ids, z-lab's + 1)
    target_layer_inputs: bool = False
    # Whether the target's own embedding scale (a Gemma-style sqrt(d)) is
    # applied to the block's embeddings; llama.cpp applies only the draft's.
    target_embedding_scale: bool = True


def read_spec(path: Path) -> DFlashSpec:
    cfg = json.loads((path / "config.json").read_text(encoding="utf-8"))
    if "dflash_config" not in cfg:
        raise ValueError(f"{path}/config.json has no dflash_config: not a DFlash draft")
    dcfg = cfg["dflash_config"]
    n_layers = int(cfg["num_hidden_layers"])
    layer_types = cfg.get("layer_types") or ["full_attention"] * n_layers
    if any(t != "full_attention" for t in layer_types):
        raise ValueError(f"{path}: draft layer types {sorted(set(layer_types))} are not supported (full_attention only)")
    version = 2 if "DFlash2DraftModel" in (cfg.get("architectures") or []) else 1
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling")
    theta = cfg.get("rope_theta", (rope or {}).get("rope_theta", 10000.0))
    if rope is not None and rope.get("rope_type", rope.get("type")) in (None, "default"):
        rope = None  # plain rope: the parameters only restate theta
    spec = DFlashSpec(
        version=version,
        hidden_size=int(cfg["hidden_size"]),
        num_hidden_layers=n_layers,
        num_attention_heads=int(cfg["num_attention_heads"]),
        num_key_value_heads=int(cfg["num_key_value_heads"]),
        head_dim=int(cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]),
        intermediate_size=int(cfg["intermediate_size"]),
        vocab_size=int(cfg["vocab_size"]),
        rms_norm_eps=float(cfg["rms_norm_eps"]),
        rope_theta=float(theta),
        rope_scaling=rope,
        max_position_embeddings=int(cfg.get("max_position_embeddings", 32768)),
        block_size=int(dcfg.get("block_size", cfg.get("block_size", 16))),
        target_layer_ids=tuple(int(i) for i in dcfg["target_layer_ids"]),
        mask_token_id=int(dcfg["mask_token_id"]),
        # Drafts attend bidirectionally inside the block unless told otherwise.
        causal=bool(cfg.get("is_causal") or False),
        input_embedding_scale=float(dcfg.get("input_embedding_scale", 1.0)),
        output_multiplier=float(dcfg.get("output_multiplier", 1.0)),
        final_logit_softcapping=dcfg.get("final_logit_softcapping", cfg.get("final_logit_softcapping")),
        conv_kernel_size=int(dcfg.get("conv_kernel_size", 0)),
        conv_group_size=int(dcfg.get("conv_group_size", 0)),
        selector_rank=int(dcfg.get("selector_rank", 0)),
        selector_top_k=int(dcfg.get("selector_top_k", 0)),
    )
    if spec.version == 2 and not (spec.conv_kernel_size and spec.conv_group_size and spec.selector_rank and spec.selector_top_k):
        raise ValueError(f"{path}: a DFlash 2 draft needs conv_kernel_size, conv_group_size, selector_rank and selector_top_k in dflash_config")
    return spec


class Attention(nn.Module):
    def __init__(self, s: DFlashSpec) -> None:
        super().__init__()
        self.n_heads = s.num_attention_heads
        self.n_kv = s.num_key_value_heads
        self.head_dim = s.head_dim
        self.causal = s.causal
        self.scale = s.attention_scale or s.head_dim ** -0.5
        self.q_proj = nn.Linear(s.hidden_size, s.num_attention_heads * s.head_dim, bias=False)
        self.k_proj = nn.Linear(s.hidden_size, s.num_key_value_heads * s.head_dim, bias=False)
        self.v_proj = nn.Linear(s.hidden_size, s.num_key_value_heads * s.head_dim, bias=False)
        self.o_proj = nn.Linear(s.num_attention_heads * s.head_dim, s.hidden_size, bias=False)
        self.q_norm = nn.RMSNorm(s.head_dim, eps=s.rms_norm_eps)
        self.k_norm = nn.RMSNorm(s.head_dim, eps=s.rms_norm_eps)

    def _heads(self, x: mx.array, n: int) -> mx.array:
        b, length, _ = x.shape
        return x.reshape(b, length, n, self.head_dim).transpose(0, 2, 1, 3)

    def __call__(self, x: mx.array, ctx: mx.array, rope: Any, cache: KVCache) -> mx.array:
        b, length, _ = x.shape
        n_ctx = ctx.shape[1]
        start = cache.offset  # absolute position of the first new context row
        # Context rows and block rows share the K/V projections: one matmul.
        both = mx.concatenate([ctx, x], axis=1)
        keys = self.k_norm(self._heads(self.k_proj(both), self.n_kv))
        values = self._heads(self.v_proj(both), self.n_kv)
        ctx_k = rope(keys[:, :, :n_ctx], offset=start)
        block_k = rope(keys[:, :, n_ctx:], offset=start + n_ctx)
        queries = rope(self.q_norm(self._heads(self.q_proj(x), self.n_heads)), offset=start + n_ctx)
        all_k, all_v = cache.update_and_fetch(ctx_k, values[:, :, :n_ctx])
        seen = all_k.shape[2]
        all_k = mx.concatenate([all_k, block_k], axis=2)
        all_v = mx.concatenate([all_v, values[:, :, n_ctx:]], axis=2)
        mask: Any = None
        if self.causal:
            q_pos = mx.arange(length)[:, None] + seen
            k_pos = mx.arange(seen + length)[None]
            mask = k_pos <= q_pos
        out = mx.fast.scaled_dot_product_attention(queries, all_k, all_v, scale=self.scale, mask=mask)
        return self.o_proj(out.transpose(0, 2, 1, 3).reshape(b, length, -1))


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def __call__(self, x: mx.array) -> mx.array:
        return self.down_proj(nn.silu(self.gate_proj(x)) * self.up_proj(x))


def _causal_group_conv(x: mx.array, dynamic: mx.array, base: mx.array, group: int) -> mx.array:
    """y[t] = sum_j (base[j] + dynamic[t, j]) * x[t - j] along the block, with
    one dynamic tap per channel group; positions before the block are zero."""
    b, length, dim = x.shape
    groups = dim // group
    xg = x.reshape(b, length, groups, group)
    taps = base.shape[0]
    y = mx.zeros_like(xg)
    for j in range(taps):
        if j >= length:
            break
        shifted = xg if j == 0 else mx.pad(xg[:, : length - j], [(0, 0), (j, 0), (0, 0), (0, 0)])
        weight = base[j].reshape(1, 1, groups, group).astype(x.dtype) + dynamic[:, :, j, :, None]
        y = y + weight * shifted
    return y.reshape(b, length, dim)


class GroupConv(nn.Module):
    """DFlash 2's dynamic causal convolution wrapped around a sublayer: one
    conv on the sublayer input, one on its output, both with per-position
    taps predicted from the (normalized) input."""

    def __init__(self, dim: int, taps: int, group: int) -> None:
        super().__init__()
        self.taps = taps
        self.group = group
        self.base_kernel = mx.zeros((2, taps, dim))
        self.kernel_projection = nn.Linear(dim, 2 * taps * (dim // group), bias=False)

    def before(self, x: mx.array) -> tuple[mx.array, mx.array]:
        b, length, dim = x.shape
        dyn = self.kernel_projection(x).reshape(b, length, 2, self.taps, dim // self.group)
        return _causal_group_conv(x, dyn[:, :, 0], self.base_kernel[0], self.group), dyn[:, :, 1]

    def after(self, y: mx.array, dyn: mx.array) -> mx.array:
        return _causal_group_conv(y, dyn, self.base_kernel[1], self.group)


class Layer(nn.Module):
    def __init__(self, s: DFlashSpec) -> None:
        super().__init__()
        self.self_attn = Attention(s)
        self.mlp = MLP(s.hidden_size, s.intermediate_size)
        self.input_layernorm = nn.RMSNorm(s.hidden_size, eps=s.rms_norm_eps)
        self.post_attention_layernorm = nn.RMSNorm(s.hidden_size, eps=s.rms_norm_eps)
        self.v2 = s.version == 2
        if self.v2:
            self.attention_conv = GroupConv(s.hidden_size, s.conv_kernel_size, s.conv_group_size)
            self.mlp_conv = GroupConv(s.hidden_size, s.conv_kernel_size, s.conv_group_size)

    def __call__(self, x: mx.array, ctx: mx.array, rope: Any, cache: KVCache) -> mx.array:
        if not self.v2:
            h = x + self.self_attn(self.input_layernorm(x), ctx, rope, cache)
            return h + self.mlp(self.post_attention_layernorm(h))
        a, dyn = self.attention_conv.before(self.input_layernorm(x))
        h = x + self.attention_conv.after(self.self_attn(a, ctx, rope, cache), dyn)
        m, dyn = self.mlp_conv.before(self.post_attention_layernorm(h))
        return h + self.mlp_conv.after(self.mlp(m), dyn)


class Selector(nn.Module):
    """DFlash 2's candidate selector: per position, the top-k tokens of the
    draft logits, rescored with a low-rank edge from the previously chosen
    token through the position's hidden state."""

    def __init__(self, s: DFlashSpec) -> None:
        super().__init__()
        self.top_k = s.selector_top_k
        self.predecessor_codebook = nn.Embedding(s.vocab_size, s.selector_rank)
        self.successor_codebook = nn.Embedding(s.vocab_size, s.selector_rank)
        self.hidden_projection = nn.Linear(s.hidden_size, s.selector_rank, bias=False)

    def __call__(
        self, hidden: mx.array, logits: mx.array, anchor: mx.array, temperature: float, key: mx.array | None
    ) -> tuple[mx.array, mx.array, mx.array | None]:
        """Returns (tokens (1, L), candidates (1, L, k), q over candidates
        (L, k) when sampling)."""
        cand = mx.argpartition(logits, -self.top_k, axis=-1)[..., -self.top_k :]
        unary = mx.take_along_axis(logits, cand, axis=-1).astype(mx.float32)
        proj = self.hidden_projection(hidden)
        prev = anchor
        chosen, q_rows = [], []
        keys = mx.random.split(key, hidden.shape[1]) if key is not None else None
        for pos in range(hidden.shape[1]):
            edge = (self.predecessor_codebook(prev)[:, None] * proj[:, pos, None] * self.successor_codebook(cand[:, pos])).sum(-1)
            score = unary[:, pos] + edge.astype(mx.float32)
            if temperature > 0:
                assert keys is not None
                scaled = score / temperature
                q_rows.append(mx.softmax(scaled, axis=-1)[0])
                pick = mx.random.categorical(scaled, key=keys[pos])
            else:
                pick = mx.argmax(score, axis=-1)
            prev = mx.take_along_axis(cand[:, pos], pick[:, None], axis=-1)[:, 0]
            chosen.append(prev)
        return mx.stack(chosen, axis=1), cand, (mx.stack(q_rows) if q_rows else None)


class _Borrowed:
    """The target's embedding and output head, kept outside the draft's
    module tree so they are neither counted nor quantized as draft weights."""

    def __init__(self, embed: Any, head: Any, scale: float) -> None:
        self.embed = embed
        self.head = head
        self.scale = scale


class DFlashDraft(nn.Module):
    def __init__(self, spec: DFlashSpec) -> None:
        super().__init__()
        self.spec = spec
        h = spec.hidden_size
        self.fc = nn.Linear(len(spec.target_layer_ids) * h, h, bias=False)
        self.hidden_norm = nn.RMSNorm(h, eps=spec.rms_norm_eps)
        self.layers = [Layer(spec) for _ in range(spec.num_hidden_layers)]
        self.norm = nn.RMSNorm(h, eps=spec.rms_norm_eps)
        if spec.version == 2:
            self.candidate_selector = Selector(spec)
        from mlx_lm.models.rope_utils import initialize_rope

        self._rope = initialize_rope(
            dims=spec.rope_dims or spec.head_dim, base=spec.rope_theta, traditional=False,
            scaling_config=spec.rope_scaling, max_position_embeddings=spec.max_position_embeddings,
        )
        self._borrowed: _Borrowed | None = None

    def bind(self, target: Any) -> None:
        """Borrow the target's token embedding and output head."""
        inner = None
        for owner in (target, getattr(target, "model", None), getattr(getattr(target, "language_model", None), "model", None)):
            if owner is not None and hasattr(owner, "embed_tokens"):
                inner = owner
                break
        if inner is None:
            raise AttributeError(f"cannot find the token embedding of {type(target).__name__}")
        embed = inner.embed_tokens
        head = getattr(target, "lm_head", None) or getattr(getattr(target, "language_model", None), "lm_head", None)
        if head is None:
            head = embed.as_linear
        own = float(getattr(embed, "embed_scale", getattr(inner, "embed_scale", 1.0))) if self.spec.target_embedding_scale else 1.0
        scale = own * self.spec.input_embedding_scale
        self._borrowed = _Borrowed(embed, head, scale)

    def make_cache(self) -> list[KVCache]:
        return [KVCache() for _ in self.layers]

    def features(self, block: mx.array, ctx_hidden: mx.array, cache: list[KVCache]) -> mx.array:
        """Final hidden states of the masked block positions (all but the
        first). Appends ``ctx_hidden`` (new context rows) to the cache."""
        assert self._borrowed is not None, "bind() the draft to its target first"
        h = self._borrowed.embed(block) * self._borrowed.scale
        ctx = self.hidden_norm(self.fc(ctx_hidden))
        for layer, c in zip(self.layers, cache):
            h = layer(h, ctx, self._rope, c)
        return self.norm(h[:, 1:])

    def logits(self, hidden: mx.array) -> mx.array:
        assert self._borrowed is not None
        out = self._borrowed.head(hidden) * self.spec.output_multiplier
        cap = self.spec.final_logit_softcapping
        if cap:
            out = mx.tanh(out / cap) * cap
        return out


def _quantize_layers(draft: DFlashDraft, bits: int, group_size: int) -> None:
    """Quantize the draft's float layers at load (those stored quantized stay as they are)."""
    nn.quantize(
        draft, group_size=group_size, bits=bits,
        class_predicate=lambda _p, m: hasattr(m, "to_quantized") and m.weight.shape[-1] % group_size == 0,
    )


def load_draft(path: Path, bits: int | None = None, group_size: int = 64) -> DFlashDraft:
    """A draft from a z-lab checkpoint directory (a llama.cpp DFlash GGUF
    file loads through lab_mlx.gguf_dflash)."""
    from lab.kit.model_files import check_model

    check_model(path)
    spec = read_spec(path)
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{path}: no .safetensors weights")
    weights: dict[str, mx.array] = {}
    for f in files:
        part: Any = mx.load(str(f))
        weights.update(part)
    # The checkpoint stores the selector codebooks as bare arrays.
    for name in ("predecessor_codebook", "successor_codebook"):
        key = f"candidate_selector.{name}"
        if key in weights:
            weights[f"{key}.weight"] = weights.pop(key)
    draft = DFlashDraft(spec)
    draft.load_weights(list(weights.items()))
    if bits:
        _quantize_layers(draft, bits, group_size)
    mx.eval(draft.parameters())
    draft.eval()
    return draft


def save_draft(draft: DFlashDraft, path: Path, config: dict[str, Any]) -> None:
    """Write a draft in the checkpoint format (used by the tiny models)."""
    from mlx.utils import tree_flatten

    path.mkdir(parents=True, exist_ok=True)
    flat = dict(tree_flatten(draft.parameters()))
    for name in ("predecessor_codebook", "successor_codebook"):
        key = f"candidate_selector.{name}.weight"
        if key in flat:
            flat[f"candidate_selector.{name}"] = flat.pop(key)
    mx.save_safetensors(str(path / "model.safetensors"), flat)
    (path / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
