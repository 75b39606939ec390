"""Synthetic hybrid targets (llama.cpp's ``qwen35`` / ``qwen35moe``: gated
delta-net layers with a recurrent state, every fourth layer full attention,
and an MTP ``nextn`` block) and DFlash drafts for them, by
:mod:`lab_llamacpp.synthetic`'s method; ``SHAPES`` lists them."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from lab.kit.tiny_gguf import finish
from lab_llamacpp import synthetic as syn

PREFIX = syn.PREFIX
VERSION = "1"
QWEN35_VOCAB = 248320


@dataclass(frozen=True)
class HybridShape(syn.Sizes):
    """A ``qwen35`` / ``qwen35moe`` target with ``n_nextn`` MTP blocks after
    its ``n_layer`` trunk layers (``n_ff``: the dense FFN)."""

    arch: str  # qwen35, qwen35moe
    n_rot: int
    rope_sections: tuple[int, int, int, int]
    ssm_n_group: int  # delta-net key heads
    ssm_dt_rank: int  # delta-net value heads
    ssm_d_state: int  # delta-net head size (keys and values)
    ssm_d_conv: int = 4
    full_attention_interval: int = 4
    rope_base: float = 10_000_000.0
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 0
    n_ff_shexp: int = 0
    n_nextn: int = 1
    quant: str = "q4_0"  # or "q4_k": see K_QUANT
    seed: int = 0
    description: str = ""

    @property
    def n_layer_all(self) -> int:
        return self.n_layer + self.n_nextn

    def is_recurrent(self, il: int) -> bool:
        return il < self.n_layer and (il + 1) % self.full_attention_interval != 0

    @property
    def key_dim(self) -> int:
        return self.ssm_d_state * self.ssm_n_group

    @property
    def value_dim(self) -> int:
        return self.ssm_d_state * self.ssm_dt_rank


@dataclass(frozen=True)
class DFlashShape(syn.Sizes):
    """A DFlash draft for a target of the same ``family`` and n_embd."""

    target_layers: tuple[int, ...]
    block_size: int = 16
    rope_base: float = 10_000_000.0
    quant: str = "q4_0"
    seed: int = 0
    description: str = ""

    arch = "dflash"


Shape = HybridShape | DFlashShape


def target_layer_ids(n_target_layers: int, n_draft_layers: int) -> tuple[int, ...]:
    """Evenly spaced from layer 1 to n_target_layers - 3, as DFlash drafts
    are trained to read their target."""
    if n_draft_layers == 1:
        return (n_target_layers // 2,)
    start, end = 1, n_target_layers - 3
    return tuple(round(start + i * (end - start) / (n_draft_layers - 1)) for i in range(n_draft_layers))


SHAPES: dict[str, Shape] = {
    "qwen35-27b": HybridShape(
        "qwen35", QWEN35_VOCAB, 5120, 64, 17408, 24, 4, 256, arch="qwen35", n_rot=64, rope_sections=(11, 11, 10, 0),
        ssm_n_group=16, ssm_dt_rank=48, ssm_d_state=128, seed=35,
        description="Qwen3.x-27B hybrid shape: 5120 x 64 layers (48 delta-net, 16 attention), ff 17408, MTP block",
    ),
    "qwen35-27b-dflash": DFlashShape(
        "qwen35", QWEN35_VOCAB, 5120, 5, 17408, 32, 8, 128, target_layer_ids(64, 5), seed=36,
        description="DFlash draft for synthetic:qwen35-27b at z-lab's shape: 5120 x 5 layers, block 16, ~1.7 B",
    ),
    "qwen35-a3b": HybridShape(
        "qwen35", QWEN35_VOCAB, 2048, 40, 512, 16, 2, 256, arch="qwen35moe", n_rot=64, rope_sections=(11, 11, 10, 0),
        ssm_n_group=16, ssm_dt_rank=32, ssm_d_state=128,
        n_expert=256, n_expert_used=8, n_ff_exp=512, n_ff_shexp=512, seed=37,
        description="Qwen3.5-35B-A3B hybrid MoE shape: 2048 x 40 layers, 256 experts (8 used) of 512, MTP block",
    ),
    "qwen35-a3b-dflash": DFlashShape(
        "qwen35", QWEN35_VOCAB, 2048, 5, 6144, 32, 4, 128, target_layer_ids(40, 5), seed=38,
        description="DFlash draft for synthetic:qwen35-a3b: 2048 x 5 layers, block 16",
    ),
    # CPU-sized, same layouts: tests and the tiny twins.
    "qwen35-tiny": HybridShape(
        "qwen35-tiny", 640, 256, 4, 512, 4, 2, 64, arch="qwen35", n_rot=16, rope_sections=(3, 3, 2, 0),
        ssm_n_group=2, ssm_dt_rank=4, ssm_d_state=32, seed=135,
        description="a tiny qwen35 hybrid (256 x 4 layers: 3 delta-net, 1 attention) with an MTP block",
    ),
    "qwen35-tiny-dflash": DFlashShape(
        "qwen35-tiny", 640, 256, 1, 512, 4, 2, 64, (1, 2), seed=136,
        description="a tiny DFlash draft for synthetic:qwen35-tiny (1 layer, reads layers 1 and 2, block 16)",
    ),
    "qwen35-tiny-a3b": HybridShape(
        "qwen35-tiny", 640, 256, 4, 128, 4, 2, 64, arch="qwen35moe", n_rot=16, rope_sections=(3, 3, 2, 0),
        ssm_n_group=2, ssm_dt_rank=4, ssm_d_state=32,
        n_expert=8, n_expert_used=2, n_ff_exp=64, n_ff_shexp=64, seed=137,
        description="a tiny qwen35moe hybrid (256 x 4 layers, 8 experts of 64) with an MoE MTP block",
    ),
    "qwen35-tiny-a3b-dflash": DFlashShape(
        "qwen35-tiny", 640, 256, 1, 512, 4, 2, 64, (1, 2), seed=138,
        description="a tiny DFlash draft for synthetic:qwen35-tiny-a3b",
    ),
}
# K-quant twins of the write-ups' pair (K-quant kernels on small batches)
SHAPES["qwen35-27b-q4k"] = replace(SHAPES["qwen35-27b"], quant="q4_k", description="synthetic:qwen35-27b as Q4_K")
SHAPES["qwen35-27b-dflash-q4k"] = replace(
    SHAPES["qwen35-27b-dflash"], quant="q4_k", description="synthetic:qwen35-27b-dflash as Q4_K")
SHAPES["qwen35-tiny-q4k"] = replace(SHAPES["qwen35-tiny"], quant="q4_k", description="synthetic:qwen35-tiny as Q4_K")


Q4_K_BLOCK = 256
Q4_K_BYTES = 144  # f16 d, f16 dmin, 12 bytes of 6-bit scales and mins, 128 of nibbles
# scale = min = 15 and dmin = 7.5 d: a weight is 15 d (q - 7.5), mean zero
# (synthetic._zero_mean_nibbles says why).
_K_SCALES = np.array([15] * 8 + [0xFF] * 4, dtype=np.uint8)
_K_STD_PER_D = 15.0 * float(np.sqrt(255 / 12))


class _PoolK:
    """synthetic.Pool's method for Q4_K: random blocks of one scale class,
    tensors are views into the pool at different offsets."""

    SLACK_BLOCKS = 1 << 13

    def __init__(self, rng: np.random.Generator, n_blocks: int, value_std: float) -> None:
        total = n_blocks + self.SLACK_BLOCKS
        raw = np.empty((total, Q4_K_BYTES), dtype=np.uint8)
        raw[:, 16:] = np.frombuffer(rng.bytes(total * 128), dtype=np.uint8).reshape(total, 128)
        d = (value_std / _K_STD_PER_D) * rng.uniform(0.75, 1.25, total)
        raw[:, 0:2] = d.astype("<f2").view(np.uint8).reshape(total, 2)
        raw[:, 2:4] = (7.5 * d).astype("<f2").view(np.uint8).reshape(total, 2)
        raw[:, 4:16] = _K_SCALES
        self.raw = raw
        self.n_blocks = n_blocks
        self._next = 0

    def take(self, shape: tuple[int, ...]) -> np.ndarray:
        *lead, cols = shape
        blocks = int(np.prod(shape)) // Q4_K_BLOCK
        if blocks > self.n_blocks:
            raise ValueError(f"pool of {self.n_blocks} blocks cannot hold {blocks}")
        offset = (self._next * 7919) % self.SLACK_BLOCKS
        self._next += 1
        return self.raw[offset : offset + blocks].reshape(*lead, cols // Q4_K_BLOCK * Q4_K_BYTES)


def _k_rows(shape: tuple[int, ...], quant: str) -> bool:
    """Whether a tensor is written as Q4_K: rows of whole 256-weight blocks
    (others fall back to Q4_0, as llama.cpp's quantize falls back)."""
    return quant == "q4_k" and shape[-1] % Q4_K_BLOCK == 0


# One tensor: name, numpy shape (rows = out, cols = in: ggml's ne reversed),
# and how it is filled: ("q4", std) a Q4_0 tensor from the pool of that
# standard deviation, ("ones",), ("normal", std) F32, or a named special.
Spec = tuple[str, tuple[int, ...], tuple[Any, ...]]

Q4 = "q4"


def _inp(fan_in: int) -> tuple[Any, ...]:
    # input projections see normalized activations: unit-variance outputs
    return (Q4, 1.0 / np.sqrt(fan_in))


def _out(fan_in: int) -> tuple[Any, ...]:
    # output projections write small updates into the residual stream
    return (Q4, syn.UPDATE_RMS / np.sqrt(fan_in))


ONES = ("ones",)


def _attn_specs(p: str, d: int, n_head: int, n_head_kv: int, hd: int, gated: bool) -> Iterator[Spec]:
    q_rows = n_head * hd * (2 if gated else 1)
    yield p + "attn_q.weight", (q_rows, d), _inp(d)
    yield p + "attn_k.weight", (n_head_kv * hd, d), _inp(d)
    yield p + "attn_v.weight", (n_head_kv * hd, d), _inp(d)
    yield p + "attn_output.weight", (d, n_head * hd), _out(n_head * hd)
    yield p + "attn_q_norm.weight", (hd,), ONES
    yield p + "attn_k_norm.weight", (hd,), ONES


def _ffn_specs(p: str, s: HybridShape) -> Iterator[Spec]:
    d = s.n_embd
    if not s.n_expert:
        yield p + "ffn_gate.weight", (s.n_ff, d), _inp(d)
        yield p + "ffn_up.weight", (s.n_ff, d), _inp(d)
        yield p + "ffn_down.weight", (d, s.n_ff), _out(s.n_ff)
        return
    e, f, fs = s.n_expert, s.n_ff_exp, s.n_ff_shexp
    yield p + "ffn_gate_inp.weight", (e, d), ("normal", 1.0 / np.sqrt(d))
    yield p + "ffn_gate_exps.weight", (e, f, d), _inp(d)
    yield p + "ffn_up_exps.weight", (e, f, d), _inp(d)
    yield p + "ffn_down_exps.weight", (e, d, f), _out(f)
    yield p + "ffn_gate_inp_shexp.weight", (d,), ("normal", 1.0 / np.sqrt(d))
    yield p + "ffn_gate_shexp.weight", (fs, d), _inp(d)
    yield p + "ffn_up_shexp.weight", (fs, d), _inp(d)
    yield p + "ffn_down_shexp.weight", (d, fs), _out(fs)


def hybrid_specs(s: HybridShape) -> Iterator[Spec]:
    d, nv = s.n_embd, s.n_vocab
    yield "token_embd.weight", (nv, d), ("embd",)
    yield "output_norm.weight", (d,), ONES
    yield "output.weight", (nv, d), ("output",)
    for il in range(s.n_layer_all):
        p = f"blk.{il}."
        yield p + "attn_norm.weight", (d,), ONES
        yield p + "post_attention_norm.weight", (d,), ONES
        if s.is_recurrent(il):
            conv_dim = 2 * s.key_dim + s.value_dim
            yield p + "attn_qkv.weight", (conv_dim, d), _inp(d)
            yield p + "attn_gate.weight", (s.value_dim, d), _inp(d)
            yield p + "ssm_conv1d.weight", (conv_dim, s.ssm_d_conv), ("normal", 0.5)
            yield p + "ssm_dt.bias", (s.ssm_dt_rank,), ONES
            yield p + "ssm_a", (s.ssm_dt_rank,), ("ssm_a",)
            yield p + "ssm_beta.weight", (s.ssm_dt_rank, d), ("normal", 1.0 / np.sqrt(d))
            yield p + "ssm_alpha.weight", (s.ssm_dt_rank, d), ("normal", 1.0 / np.sqrt(d))
            yield p + "ssm_norm.weight", (s.ssm_d_state,), ONES
            yield p + "ssm_out.weight", (d, s.value_dim), _out(s.value_dim)
        else:
            yield from _attn_specs(p, d, s.n_head, s.n_head_kv, s.head_dim, gated=True)
        yield from _ffn_specs(p, s)
        if il >= s.n_layer:
            yield p + "nextn.eh_proj.weight", (d, 2 * d), _inp(2 * d)
            yield p + "nextn.enorm.weight", (d,), ONES
            yield p + "nextn.hnorm.weight", (d,), ONES
            yield p + "nextn.shared_head_norm.weight", (d,), ONES


def dflash_specs(s: DFlashShape) -> Iterator[Spec]:
    d = s.n_embd
    n_in = d * len(s.target_layers)
    yield "fc.weight", (d, n_in), _inp(n_in)
    yield "enc.output_norm.weight", (d,), ONES
    yield "output_norm.weight", (d,), ONES
    for il in range(s.n_layer):
        p = f"blk.{il}."
        yield p + "attn_norm.weight", (d,), ONES
        yield from _attn_specs(p, d, s.n_head, s.n_head_kv, s.head_dim, gated=False)
        yield p + "ffn_norm.weight", (d,), ONES
        yield p + "ffn_gate.weight", (s.n_ff, d), _inp(d)
        yield p + "ffn_up.weight", (s.n_ff, d), _inp(d)
        yield p + "ffn_down.weight", (d, s.n_ff), _out(s.n_ff)


def specs(s: Shape) -> list[Spec]:
    return list(hybrid_specs(s) if isinstance(s, HybridShape) else dflash_specs(s))


def _q4(fill: tuple[Any, ...]) -> bool:
    return fill[0] in (Q4, "embd", "output")


def parameters(s: Shape) -> int:
    """Weights in the file (a DFlash draft's shared embeddings and head
    not counted: they are the target's)."""
    return sum(int(np.prod(shape)) for _, shape, _ in specs(s))


def q4_0_bytes(s: Shape) -> int:
    """Bytes of 4-bit tensor data in the file (Q4_0 blocks, or Q4_K where
    the shape says so: the same 4.5 bits a weight)."""
    total = 0
    for _, shape, fill in specs(s):
        if _q4(fill):
            n = int(np.prod(shape))
            total += n // Q4_K_BLOCK * Q4_K_BYTES if _k_rows(shape, s.quant) else n // syn.Q4_0_BLOCK * syn.Q4_0_BYTES
    return total


def file_bytes(s: Shape) -> int:
    """Tensor data bytes in the file: 4-bit blocks and F32 tensors."""
    f32 = sum(4 * int(np.prod(shape)) for _, shape, fill in specs(s) if not _q4(fill))
    return q4_0_bytes(s) + f32


def _header(w: Any, s: Shape, voc: syn.Vocab) -> None:
    import gguf

    a = s.arch
    w.add_name(f"speclab synthetic {a} ({s.family}, random Q4_0 weights)")
    ftype = gguf.LlamaFileType.MOSTLY_Q4_K_S if s.quant == "q4_k" else gguf.LlamaFileType.MOSTLY_Q4_0
    w.add_uint32("general.file_type", int(ftype))
    w.add_uint32(f"{a}.context_length", 262144 if isinstance(s, HybridShape) else 32768)
    w.add_uint32(f"{a}.embedding_length", s.n_embd)
    syn.add_heads(w, a, s)
    w.add_float32(f"{a}.rope.freq_base", s.rope_base)
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_uint32(f"{a}.vocab_size", s.n_vocab)
    if isinstance(s, HybridShape):
        w.add_uint32(f"{a}.block_count", s.n_layer_all)
        w.add_uint32(f"{a}.nextn_predict_layers", s.n_nextn)
        w.add_uint32(f"{a}.feed_forward_length", s.n_ff)
        w.add_uint32(f"{a}.rope.dimension_count", s.n_rot)
        w.add_array(f"{a}.rope.dimension_sections", list(s.rope_sections))
        for key, value in (("full_attention_interval", s.full_attention_interval), ("ssm.conv_kernel", s.ssm_d_conv),
                           ("ssm.inner_size", s.value_dim), ("ssm.state_size", s.ssm_d_state),
                           ("ssm.time_step_rank", s.ssm_dt_rank), ("ssm.group_count", s.ssm_n_group)):
            w.add_uint32(f"{a}.{key}", value)
        if s.n_expert:
            w.add_uint32(f"{a}.expert_count", s.n_expert)
            w.add_uint32(f"{a}.expert_used_count", s.n_expert_used)
            w.add_uint32(f"{a}.expert_feed_forward_length", s.n_ff_exp)
            w.add_uint32(f"{a}.expert_shared_feed_forward_length", s.n_ff_shexp)
    else:
        w.add_uint32(f"{a}.block_count", s.n_layer)
        w.add_uint32(f"{a}.feed_forward_length", s.n_ff)
        w.add_uint32(f"{a}.rope.dimension_count", s.head_dim)
        w.add_array(f"{a}.target_layers", list(s.target_layers))
        w.add_uint32(f"{a}.block_size", s.block_size)
        # the block's undecided positions: a control token, never a greedy pick
        w.add_uint32("tokenizer.ggml.mask_token_id", 0)
    syn.add_vocab(w, voc)


def write(s: Shape, out: Path | str) -> None:
    """Write ``s`` as a Q4_0 GGUF at ``out``."""
    import gguf

    rng = np.random.default_rng(s.seed)
    voc = syn.vocab(s.n_vocab)
    w = gguf.GGUFWriter(str(out), s.arch)
    _header(w, s, voc)
    q4 = gguf.GGMLQuantizationType.Q4_0
    q4k = gguf.GGMLQuantizationType.Q4_K
    all_specs = specs(s)
    # One pool per scale class and block kind, as large as its largest tensor.
    need: dict[tuple[bool, float], int] = {}
    for _, shape, fill in all_specs:
        if fill[0] == Q4:
            k = _k_rows(shape, s.quant)
            per = Q4_K_BLOCK if k else syn.Q4_0_BLOCK
            need[(k, fill[1])] = max(need.get((k, fill[1]), 0), int(np.prod(shape)) // per)
    pools: dict[tuple[bool, float], syn.Pool | _PoolK] = {
        (k, std): (_PoolK(rng, n, std) if k else syn.Pool(rng, n, std)) for (k, std), n in sorted(need.items())}
    embd = output = np.zeros((0, syn.Q4_0_BYTES), dtype=np.uint8)
    embd_k = isinstance(s, HybridShape) and _k_rows((s.n_vocab, s.n_embd), s.quant)
    if isinstance(s, HybridShape):
        # The output matrix holds row E[t] at row next[t]: see synthetic.py.
        if embd_k:
            embd = _PoolK(rng, s.n_vocab * s.n_embd // Q4_K_BLOCK, 1.0).raw[: s.n_vocab * s.n_embd // Q4_K_BLOCK]
            embd = embd.reshape(s.n_vocab, s.n_embd // Q4_K_BLOCK * Q4_K_BYTES)
        else:
            embd = syn.q4_0_rows(rng, s.n_vocab, s.n_embd, 1.0)
        table = syn.family_table(s.n_vocab, s.family)
        normal = np.arange(syn.FIRST_NORMAL, s.n_vocab)
        output = np.zeros_like(embd)
        output[table[normal]] = embd[normal]
    for name, shape, fill in all_specs:
        kind = fill[0]
        if kind == Q4:
            k = _k_rows(shape, s.quant)
            w.add_tensor(name, pools[(k, fill[1])].take(shape), raw_dtype=q4k if k else q4)
        elif kind == "embd":
            w.add_tensor(name, embd, raw_dtype=q4k if embd_k else q4)
        elif kind == "output":
            w.add_tensor(name, output, raw_dtype=q4k if embd_k else q4)
        elif kind == "ones":
            w.add_tensor(name, np.ones(shape, dtype=np.float32))
        elif kind == "normal":
            w.add_tensor(name, (rng.standard_normal(shape) * fill[1]).astype(np.float32))
        elif kind == "ssm_a":
            # -exp(A_log): per-head decay rates, spread as trained heads' are
            w.add_tensor(name, -rng.uniform(0.5, 8.0, shape).astype(np.float32))
        else:
            raise AssertionError(kind)
    finish(w)


def filename(name: str) -> str:
    return f"synthetic-{name}.{'Q4_K' if SHAPES[name].quant == 'q4_k' else 'Q4_0'}.gguf"


def register_models(register_model: Callable[..., None]) -> None:
    """Every hybrid ``synthetic:`` model, beside :mod:`lab_llamacpp.synthetic`'s."""
    syn.register_family(register_model, SHAPES, write, filename, VERSION)


def resolve(ref: str) -> Path:
    """The cached file of a hybrid ``synthetic:`` model, written on first use."""
    return syn.resolve_in_family(ref, SHAPES, write, filename, VERSION)
