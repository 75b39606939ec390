"""Writing tiny GGUF models: SmolLM2's tokenizer and template (one
vocabulary for all, as drafts need), seeded F16 weights, the llama-style
tensors. ``gguf`` is imported when a model is written."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Dims:
    """The sizes every llama-style block shares."""

    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_ctx_train: int = 4096


class F16Weights:
    """Seeded F16 weights in numpy order (rows = out, cols = in: ggml's ne
    reversed), scaled by 1/sqrt(fan in)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def mat(self, *shape: int, scale: float = 1.0) -> Any:
        return (self.rng.standard_normal(shape) * (scale / np.sqrt(shape[-1]))).astype(np.float16)

    @staticmethod
    def ones(n: int) -> Any:
        return np.ones(n, dtype=np.float32)


def add_dims(w: Any, arch: str, dims: Dims, n_layer: int, n_vocab: int, n_ff: int | None = None) -> None:
    """The structural hyperparameters, and the file type (mostly F16)."""
    w.add_uint32(f"{arch}.block_count", n_layer)
    w.add_uint32(f"{arch}.context_length", dims.n_ctx_train)
    w.add_uint32(f"{arch}.embedding_length", dims.n_embd)
    w.add_uint32(f"{arch}.feed_forward_length", dims.n_ff if n_ff is None else n_ff)
    w.add_uint32(f"{arch}.attention.head_count", dims.n_head)
    w.add_uint32(f"{arch}.attention.head_count_kv", dims.n_head_kv)
    w.add_uint32(f"{arch}.vocab_size", n_vocab)
    w.add_uint32("general.file_type", 1)


def add_attention(w: Any, W: F16Weights, i: int, dims: Dims, qk_norm: bool = False, out_scale: float = 1.0) -> None:
    d, hd = dims.n_embd, dims.head_dim
    w.add_tensor(f"blk.{i}.attn_norm.weight", W.ones(d))
    w.add_tensor(f"blk.{i}.attn_q.weight", W.mat(dims.n_head * hd, d))
    w.add_tensor(f"blk.{i}.attn_k.weight", W.mat(dims.n_head_kv * hd, d))
    w.add_tensor(f"blk.{i}.attn_v.weight", W.mat(dims.n_head_kv * hd, d))
    w.add_tensor(f"blk.{i}.attn_output.weight", W.mat(d, dims.n_head * hd, scale=out_scale))
    if qk_norm:
        w.add_tensor(f"blk.{i}.attn_q_norm.weight", W.ones(hd))
        w.add_tensor(f"blk.{i}.attn_k_norm.weight", W.ones(hd))


def add_dense_ffn(w: Any, W: F16Weights, i: int, dims: Dims, norm: str = "ffn_norm", down_scale: float = 1.0) -> None:
    w.add_tensor(f"blk.{i}.{norm}.weight", W.ones(dims.n_embd))
    w.add_tensor(f"blk.{i}.ffn_gate.weight", W.mat(dims.n_ff, dims.n_embd))
    w.add_tensor(f"blk.{i}.ffn_up.weight", W.mat(dims.n_ff, dims.n_embd))
    w.add_tensor(f"blk.{i}.ffn_down.weight", W.mat(dims.n_embd, dims.n_ff, scale=down_scale))


@dataclass(frozen=True)
class Tokenizer:
    fields: list[tuple[str, Any, Any]]  # (key, value, gguf value type or (ARRAY, sub type))
    n_vocab: int


def smollm2_tokenizer() -> Tokenizer:
    """The ``tokenizer.*`` metadata of the embedded SmolLM2 model."""
    import gguf

    from lab.kit.models import embedded_smollm2

    reader = gguf.GGUFReader(str(embedded_smollm2()))
    fields: list[tuple[str, Any, Any]] = []
    n_vocab = 0
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        value = field.contents()
        types = list(field.types)
        if key == "tokenizer.ggml.tokens":
            n_vocab = len(value)
        fields.append((key, value, types))
    if n_vocab == 0:
        raise RuntimeError("the embedded model has no token list")
    return Tokenizer(fields, n_vocab)


def writer(out: Path, arch: str, tok: Tokenizer) -> Any:
    """A ``gguf.GGUFWriter`` for ``out`` with its name and the tokenizer in."""
    import gguf

    w = gguf.GGUFWriter(str(out), arch)
    w.add_name(f"speclab {arch} (tiny, random weights)")
    for key, value, types in tok.fields:
        main = types[0]
        if main == gguf.GGUFValueType.ARRAY:
            w.add_key_value(key, value, main, sub_type=types[1])
        else:
            w.add_key_value(key, value, main)
    return w


def finish(w: Any) -> None:
    """Write the header, the metadata and the tensors, and close the file."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
