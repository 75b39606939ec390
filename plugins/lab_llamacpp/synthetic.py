"""Synthetic GGUF models at real models' shapes, for timing on accelerators:
``synthetic:<name>`` writes random Q4_0 blocks straight to the file (an
8B shape in seconds), so decode, verify and draft timings are true while
acceptance comes from the oracle drafter or a draft that agrees with its
target on a chosen share of tokens.

Greedy picks stand far from ties, so decode and verify agree
(docs/design-notes.md gives the construction)."""

from __future__ import annotations

import hashlib
import itertools
import string
import time
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from lab.kit.models import written
from lab.kit.tiny_gguf import finish

PREFIX = "synthetic:"
VERSION = "2"

Q4_0_BLOCK = 32  # weights per block
Q4_0_BYTES = 18  # one f16 scale + 16 bytes of 4-bit values
# Standard deviation of a Q4_0 value (q - 8) over the nibbles written here:
# -7..7 uniform with 0 twice as likely, sqrt(2 * 140 / 16).
_NIBBLE_STD = float(np.sqrt(280 / 16))

N_CONTROL = 3  # <unk>, <s>, </s>
N_BYTE = 256
FIRST_NORMAL = N_CONTROL + N_BYTE
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_BYTE = 1, 2, 3, 6

# RMS of each residual update against the embeddings' 1.0: the last token
# still decides the next after 96 updates, and f16 scales stay normal.
UPDATE_RMS = 0.05


@dataclass(frozen=True)
class Sizes:
    """The sizes every synthetic shape has. ``family`` names the vocabulary
    and the token permutation; models of one family share both."""

    family: str
    n_vocab: int
    n_embd: int
    n_layer: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int


@dataclass(frozen=True)
class Shape(Sizes):
    arch: str  # llama, qwen3, qwen3moe
    rope_base: float = 500000.0
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 0
    # Share of normal tokens on which this model's next-token map is the
    # family's; below 1 a draft disagrees with its target on the rest.
    agreement: float = 1.0
    seed: int = 0
    description: str = ""

    @property
    def qk_norm(self) -> bool:
        return self.arch in ("qwen3", "qwen3moe")

    def q4_0_bytes(self) -> int:
        """Bytes of Q4_0 weight data (norms and the router excluded)."""
        d, hd = self.n_embd, self.head_dim
        attn = d * hd * (2 * self.n_head + 2 * self.n_head_kv)
        ffn = 3 * d * (self.n_expert * self.n_ff_exp if self.n_expert else self.n_ff)
        weights = 2 * self.n_vocab * d + self.n_layer * (attn + ffn)
        return weights // Q4_0_BLOCK * Q4_0_BYTES


LLAMA3_VOCAB = 128256
QWEN3_VOCAB = 151936

SHAPES: dict[str, Shape] = {
    "llama-8b": Shape(
        "llama3", LLAMA3_VOCAB, 4096, 32, 14336, 32, 8, 128, arch="llama", seed=8,
        description="Llama-3.1-8B shape: 4096 x 32 layers, ff 14336, 32/8 heads",
    ),
    "llama-1b": Shape(
        "llama3", LLAMA3_VOCAB, 2048, 16, 8192, 32, 8, 64, arch="llama", seed=1,
        description="Llama-3.2-1B-like draft for synthetic:llama-8b, agrees on every token",
    ),
    "llama-1b-a70": Shape(
        "llama3", LLAMA3_VOCAB, 2048, 16, 8192, 32, 8, 64, arch="llama", agreement=0.7, seed=2,
        description="the 1B draft agreeing with synthetic:llama-8b on 70 % of tokens",
    ),
    "qwen3-a3b": Shape(
        "qwen3", QWEN3_VOCAB, 2048, 48, 6144, 32, 4, 128, arch="qwen3moe", rope_base=1000000.0,
        n_expert=128, n_expert_used=8, n_ff_exp=768, seed=30,
        description="Qwen3-30B-A3B shape: MoE, 2048 x 48 layers, 128 experts (8 used) of ff 768",
    ),
    # Small enough for a CPU: smoke runs of profiles and device scripts.
    "tiny": Shape(
        "tiny", 640, 256, 2, 512, 4, 2, 64, arch="llama", seed=100,
        description="a tiny llama (256 x 2 layers, 640 tokens) for smoke runs on a CPU",
    ),
    "tiny-draft": Shape(
        "tiny", 640, 128, 1, 256, 2, 1, 64, arch="llama", seed=101,
        description="a draft for synthetic:tiny, agrees on every token",
    ),
    "qwen3-0.6b": Shape(
        "qwen3", QWEN3_VOCAB, 1024, 28, 3072, 16, 8, 128, arch="qwen3", rope_base=1000000.0, seed=6,
        description="Qwen3-0.6B shape: a draft for synthetic:qwen3-a3b, agrees on every token",
    ),
}


def shape_for(ref: str) -> Shape:
    name = ref[len(PREFIX):] if ref.startswith(PREFIX) else ref
    try:
        return SHAPES[name]
    except KeyError:
        known = ", ".join(PREFIX + n for n in SHAPES)
        raise KeyError(f"no synthetic model {ref!r}; known: {known}") from None


def _normal_pieces() -> Iterator[str]:
    """Printable characters, then letter strings with and without the
    word-start mark, shortest first: every prefix of a piece is a piece, so
    SentencePiece merges reach the long ones."""
    yield "\u2581"
    for ch in string.printable:
        if ch.isprintable() and ch != " ":
            yield ch
    letters = string.ascii_lowercase
    for n in itertools.count(1):
        for combo in itertools.product(letters, repeat=n):
            word = "".join(combo)
            yield "\u2581" + word
            if n > 1:
                yield word


@dataclass(frozen=True)
class Vocab:
    tokens: list[str]
    scores: np.ndarray
    types: np.ndarray


def vocab(n_vocab: int) -> Vocab:
    if n_vocab <= FIRST_NORMAL + 100:
        raise ValueError(f"a synthetic vocabulary needs more than {FIRST_NORMAL + 100} tokens")
    tokens = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(N_BYTE))]
    tokens += list(itertools.islice(_normal_pieces(), n_vocab - len(tokens)))
    types = np.full(n_vocab, TOKEN_NORMAL, dtype=np.int32)
    types[0] = TOKEN_UNKNOWN
    types[1:N_CONTROL] = TOKEN_CONTROL
    types[N_CONTROL:FIRST_NORMAL] = TOKEN_BYTE
    # Longer pieces score higher so that merges prefer them.
    scores = np.array([float(len(t)) - i / n_vocab for i, t in enumerate(tokens)], dtype=np.float32)
    scores[:FIRST_NORMAL] = 0.0
    return Vocab(tokens, scores, types)


def next_token_table(shape: Shape) -> np.ndarray:
    """``table[t]``: the greedy next token after a normal token ``t`` (the
    family's permutation; for ``agreement`` < 1 changed on the rest).
    Entries for control and byte tokens are -1: no output row answers
    them, so they make no wide-margin pick."""
    return family_table(shape.n_vocab, shape.family, shape.agreement, shape.seed)


def family_table(n: int, family: str, agreement: float = 1.0, seed: int = 0) -> np.ndarray:
    """:func:`next_token_table` for any writer: a vocabulary of ``n``
    tokens, the ``family``'s permutation, kept on a share ``agreement``."""
    normal = np.arange(FIRST_NORMAL, n)
    family_rng = np.random.default_rng(_family_seed(family))
    perm = family_rng.permutation(normal)
    table = np.full(n, -1, dtype=np.int64)
    table[normal] = perm
    if agreement < 1.0:
        rng = np.random.default_rng(seed + 1_000_003)
        n_off = int(round((1.0 - agreement) * len(normal)))
        if n_off >= 2:
            off = rng.choice(normal, size=n_off, replace=False)
            # A cyclic shift among the chosen tokens: no fixed point, so each
            # of them maps elsewhere, and the map stays a permutation.
            table[off] = perm[off - FIRST_NORMAL][np.roll(np.arange(n_off), 1)]
    return table


def _family_seed(family: str) -> int:
    return int.from_bytes(hashlib.sha256(family.encode()).digest()[:4], "little")


def _zero_mean_nibbles(qs: np.ndarray) -> np.ndarray:
    """Nibble 0 (-8) becomes 8 (0), so weights have mean 0: a -0.5 mean
    swamps the embedding through wide FFNs and the greedy pick stops
    depending on the last token."""
    return _NIBBLE_FIX[qs]


def _nibble_fix_table() -> np.ndarray:
    byte = np.arange(256, dtype=np.uint8)
    lo, hi = byte & 0x0F, byte >> 4
    lo[lo == 0] = 8
    hi[hi == 0] = 8
    return (lo | (hi << 4)).astype(np.uint8)


_NIBBLE_FIX = _nibble_fix_table()


class Pool:
    """Random Q4_0 blocks with one scale class; tensors are views into it at
    different block offsets, so an 8B model's 4.7 GB need ~100 MB of RAM."""

    SLACK_BLOCKS = 1 << 16

    def __init__(self, rng: np.random.Generator, n_blocks: int, value_std: float) -> None:
        total = n_blocks + self.SLACK_BLOCKS
        raw = np.frombuffer(rng.bytes(total * Q4_0_BYTES), dtype=np.uint8).reshape(total, Q4_0_BYTES).copy()
        raw[:, 2:] = _zero_mean_nibbles(raw[:, 2:])
        # Per-block scales jittered around the class's scale, as trained
        # weights' blocks differ.
        scales = (value_std / _NIBBLE_STD) * rng.uniform(0.75, 1.25, total)
        raw[:, :2] = scales.astype("<f2").view(np.uint8).reshape(total, 2)
        self.raw = raw
        self.n_blocks = n_blocks
        self._next = 0

    def take(self, shape: tuple[int, ...]) -> np.ndarray:
        """A (…, rows, row_bytes) view holding prod(shape) / 32 blocks."""
        *lead, cols = shape
        if cols % Q4_0_BLOCK:
            raise ValueError(f"Q4_0 rows need a multiple of {Q4_0_BLOCK} columns, got {cols}")
        blocks = int(np.prod(shape)) // Q4_0_BLOCK
        if blocks > self.n_blocks:
            raise ValueError(f"pool of {self.n_blocks} blocks cannot hold {blocks}")
        offset = (self._next * 7919) % self.SLACK_BLOCKS
        self._next += 1
        flat = self.raw[offset : offset + blocks]
        return flat.reshape(*lead, cols // Q4_0_BLOCK * Q4_0_BYTES)


def q4_0_rows(rng: np.random.Generator, rows: int, cols: int, value_std: float) -> np.ndarray:
    pool = Pool(rng, rows * cols // Q4_0_BLOCK, value_std)
    return pool.raw[: rows * cols // Q4_0_BLOCK].reshape(rows, cols // Q4_0_BLOCK * Q4_0_BYTES)


def add_heads(w: Any, arch: str, sizes: Sizes) -> None:
    w.add_uint32(f"{arch}.attention.head_count", sizes.n_head)
    w.add_uint32(f"{arch}.attention.head_count_kv", sizes.n_head_kv)
    w.add_uint32(f"{arch}.attention.key_length", sizes.head_dim)
    w.add_uint32(f"{arch}.attention.value_length", sizes.head_dim)


def add_vocab(w: Any, voc: Vocab) -> None:
    w.add_tokenizer_model("llama")
    w.add_token_list(voc.tokens)
    w.add_token_scores(voc.scores.tolist())
    w.add_token_types(voc.types.tolist())
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)


def write(shape: Shape, out: Path | str) -> None:
    """Write ``shape`` as a Q4_0 GGUF at ``out``."""
    import gguf

    arch = shape.arch
    rng = np.random.default_rng(shape.seed)
    voc = vocab(shape.n_vocab)
    w = gguf.GGUFWriter(str(out), arch)
    w.add_name(f"speclab synthetic {arch} ({shape.family}, random Q4_0 weights)")
    w.add_uint32("general.file_type", int(gguf.LlamaFileType.MOSTLY_Q4_0))
    w.add_uint32(f"{arch}.block_count", shape.n_layer)
    w.add_uint32(f"{arch}.context_length", 32768)
    w.add_uint32(f"{arch}.embedding_length", shape.n_embd)
    w.add_uint32(f"{arch}.feed_forward_length", shape.n_ff)
    add_heads(w, arch, shape)
    w.add_uint32(f"{arch}.rope.dimension_count", shape.head_dim)
    w.add_float32(f"{arch}.rope.freq_base", shape.rope_base)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_uint32(f"{arch}.vocab_size", shape.n_vocab)
    if shape.n_expert:
        w.add_uint32(f"{arch}.expert_count", shape.n_expert)
        w.add_uint32(f"{arch}.expert_used_count", shape.n_expert_used)
        w.add_uint32(f"{arch}.expert_feed_forward_length", shape.n_ff_exp)
    add_vocab(w, voc)

    q4 = gguf.GGMLQuantizationType.Q4_0
    d, hd, nv = shape.n_embd, shape.head_dim, shape.n_vocab

    # Embeddings: unit RMS. The output matrix holds row E[t] at row
    # next[t], so the logit of next[t] after t is |E[t]|^2; rows of control
    # and byte tokens stay zero (scale 0) and never win.
    embd = q4_0_rows(rng, nv, d, 1.0)
    table = next_token_table(shape)
    normal = np.arange(FIRST_NORMAL, nv)
    output = np.zeros_like(embd)
    output[table[normal]] = embd[normal]
    w.add_tensor("token_embd.weight", embd, raw_dtype=q4)
    w.add_tensor("output_norm.weight", np.ones(d, dtype=np.float32))
    w.add_tensor("output.weight", output, raw_dtype=q4)

    ff_in = shape.n_ff_exp if shape.n_expert else shape.n_ff
    ff_rows = ff_in * max(shape.n_expert, 1)
    # Input projections see normalized activations: unit-variance outputs.
    # Output projections write into the residual: UPDATE_RMS.
    wide = Pool(rng, max(ff_rows, shape.n_head * hd) * d // Q4_0_BLOCK, 1.0 / np.sqrt(d))
    attn_out = Pool(rng, shape.n_head * hd * d // Q4_0_BLOCK, UPDATE_RMS / np.sqrt(shape.n_head * hd))
    ffn_out = Pool(rng, ff_rows * d // Q4_0_BLOCK, UPDATE_RMS / np.sqrt(ff_in))
    ones_d = np.ones(d, dtype=np.float32)
    ones_hd = np.ones(hd, dtype=np.float32)
    for i in range(shape.n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones_d)
        w.add_tensor(p + "attn_q.weight", wide.take((shape.n_head * hd, d)), raw_dtype=q4)
        w.add_tensor(p + "attn_k.weight", wide.take((shape.n_head_kv * hd, d)), raw_dtype=q4)
        w.add_tensor(p + "attn_v.weight", wide.take((shape.n_head_kv * hd, d)), raw_dtype=q4)
        w.add_tensor(p + "attn_output.weight", attn_out.take((d, shape.n_head * hd)), raw_dtype=q4)
        if shape.qk_norm:
            w.add_tensor(p + "attn_q_norm.weight", ones_hd)
            w.add_tensor(p + "attn_k_norm.weight", ones_hd)
        w.add_tensor(p + "ffn_norm.weight", ones_d)
        if shape.n_expert:
            e, f = shape.n_expert, shape.n_ff_exp
            router = (rng.standard_normal((e, d)) / np.sqrt(d)).astype(np.float32)
            w.add_tensor(p + "ffn_gate_inp.weight", router)
            w.add_tensor(p + "ffn_gate_exps.weight", wide.take((e, f, d)), raw_dtype=q4)
            w.add_tensor(p + "ffn_up_exps.weight", wide.take((e, f, d)), raw_dtype=q4)
            w.add_tensor(p + "ffn_down_exps.weight", ffn_out.take((e, d, f)), raw_dtype=q4)
        else:
            w.add_tensor(p + "ffn_gate.weight", wide.take((shape.n_ff, d)), raw_dtype=q4)
            w.add_tensor(p + "ffn_up.weight", wide.take((shape.n_ff, d)), raw_dtype=q4)
            w.add_tensor(p + "ffn_down.weight", ffn_out.take((d, shape.n_ff)), raw_dtype=q4)
    finish(w)


def filename(name: str) -> str:
    return f"synthetic-{name}.Q4_0.gguf"


def register_models(register_model: Callable[..., None]) -> None:
    """Every ``synthetic:`` model, through the plugin's ``lab_register_models``."""
    register_family(register_model, SHAPES, write, filename, VERSION)


def resolve(ref: str) -> Path:
    """The cached file of a ``synthetic:`` model, written on first use."""
    return resolve_in_family(ref, SHAPES, write, filename, VERSION)


def register_family(register_model: Callable[..., None], shapes: Mapping[str, Any],
                    write: Callable[[Any, Path], None], filename: Callable[[str], str], version: str) -> None:
    """``synthetic:NAME`` for each of ``shapes``, written by ``write``."""
    for name, shape in shapes.items():
        register_model(PREFIX + name, partial(write, shape), filename(name), version)


def resolve_in_family(ref: str, shapes: Mapping[str, Any], write: Callable[[Any, Path], None],
                      filename: Callable[[str], str], version: str) -> Path:
    name = ref[len(PREFIX):] if ref.startswith(PREFIX) else ref
    if name not in shapes:
        raise KeyError(f"no synthetic model {ref!r} here; known: {', '.join(PREFIX + n for n in shapes)}")
    return written(PREFIX + name, filename(name), version, partial(write, shapes[name]))


def scaled(name: str, **changes: Any) -> Shape:
    """A named shape with fields changed: tests write tiny models with the
    same writer."""
    return replace(SHAPES[name], **changes)


def timed_write(shape: Shape, out: Path | str) -> tuple[float, int]:
    """(seconds, bytes) of one write."""
    t0 = time.perf_counter()
    write(shape, out)
    return time.perf_counter() - t0, Path(out).stat().st_size
