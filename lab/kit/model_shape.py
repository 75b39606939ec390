"""A model's shape for the memory estimate (:class:`lab.base.footprint.ModelShape`),
read from its files' headers only: a GGUF's metadata and tensor table
(split files summed), an MLX / Hugging Face directory's config.json and
safetensors headers. No tensor data is read, no engine imported.

Tensor bytes come from the GGUF's own offsets (each tensor runs to the next,
the last to the end of its file), so a type this reader does not know still
counts at the size the file gives it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from lab.base.footprint import ModelShape
from lab.kit.model_files import (
    MAX_CONFIG_BYTES,
    ModelFileError,
    check_config,
    check_gguf,
    read_gguf_header,
    regular_file,
    safetensors_header,
)

# GGUF architectures with no attention at all: every layer keeps recurrent state
RECURRENT_ONLY = frozenset({"mamba", "mamba2", "rwkv6", "rwkv7", "arwkv7", "rwkv6qwen2"})
# llama.cpp's sliding-window layer pattern where the file does not state it
# (llama-model.cpp: every Nth layer attends to the whole context)
SWA_PATTERNS = {"gemma2": 2, "gemma3": 6, "gemma3n": 5, "cohere2": 4}
_SPLIT = re.compile(r"^(?P<stem>.*)-(?P<i>\d{5})-of-(?P<n>\d{5})\.gguf$")
_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
_SAFETENSORS_WIDTH = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "U32": 4, "I16": 2, "U16": 2,
                      "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}
_FLOATS = {"F32", "F16", "BF16"}


class ShapeUnknown(ValueError):
    """The files do not say enough to size the model; the message says what is missing."""


def read_shape(path: Path | str) -> ModelShape:
    """The shape of the model at ``path``: a GGUF file (the first of a
    split set) or an MLX / Hugging Face directory. ShapeUnknown or
    ModelFileError where its headers do not tell."""
    p = Path(path)
    if p.is_dir():
        return directory_shape(p)
    regular_file(p)  # a FIFO would block the open below for good
    with open(p, "rb") as f:
        magic = f.read(4)
    if magic == b"GGUF":
        return gguf_shape(p)
    if p.suffix == ".safetensors":
        return weights_only(safetensors_tensors(p))
    raise ShapeUnknown(f"{p}: neither a GGUF file nor a model directory")


# -- GGUF ---------------------------------------------------------------------------


def gguf_files(path: Path) -> list[Path]:
    """``path`` and, for the first file of a split model, the rest of it."""
    m = _SPLIT.match(path.name)
    if m is None:
        return [path]
    n = int(m.group("n"))
    return [path.with_name(f"{m.group('stem')}-{i:05d}-of-{n:05d}.gguf") for i in range(1, n + 1)]


def gguf_tensor_bytes(path: Path) -> tuple[dict[str, Any], dict[str, tuple[tuple[int, ...], int, int]]]:
    """A GGUF's metadata and, per tensor, (dims, bytes from its offsets, ggml type)."""
    md, tensors = read_gguf_header(path)
    size = regular_file(path).st_size
    align = md.get("general.alignment", 32)
    align = align if isinstance(align, int) and align > 0 else 32
    start = -(-int(md.pop("__data_start__")) // align) * align
    order = sorted(tensors, key=lambda t: t[3])
    out: dict[str, tuple[tuple[int, ...], int, int]] = {}
    for i, (name, dims, ggml_type, offset) in enumerate(order):
        end = order[i + 1][3] if i + 1 < len(order) else size - start
        out[name] = (dims, max(0, end - offset), ggml_type)
    return md, out


def _per_layer(value: Any, n: int, default: int) -> list[int]:
    if isinstance(value, list):
        got = [int(v) for v in value[:n]]
        return got + [got[-1] if got else default] * (n - len(got))
    return [int(value) if isinstance(value, int) else default] * n


def gguf_shape(path: Path) -> ModelShape:
    files = [f for f in gguf_files(path) if f.exists()]
    # the header held to the loader's own bounds first: a hostile block count
    # would otherwise make per-layer lists of a billion entries here
    check_gguf(files[0])
    md, tensors = gguf_tensor_bytes(files[0])
    for extra in files[1:]:
        tensors.update(gguf_tensor_bytes(extra)[1])
    arch = md.get("general.architecture")
    if not isinstance(arch, str):
        raise ShapeUnknown(f"{path}: no general.architecture")

    def key(suffix: str, default: Any = None) -> Any:
        return md.get(f"{arch}.{suffix}", default)

    n_all = key("block_count")
    n_embd = key("embedding_length")
    if not isinstance(n_all, int) or not isinstance(n_embd, int):
        raise ShapeUnknown(f"{path}: {arch}.block_count or {arch}.embedding_length missing")
    nextn = int(key("nextn_predict_layers", 0) or 0)
    n_layer = n_all - nextn
    heads = _per_layer(key("attention.head_count"), n_all, 0)
    kv_heads = _per_layer(key("attention.head_count_kv", key("attention.head_count")), n_all, 0)
    head = max(heads) if heads else 0
    k_len = int(key("attention.key_length", n_embd // head if head else 0) or 0)
    v_len = int(key("attention.value_length", k_len) or 0)
    lora = key("attention.kv_lora_rank")
    if isinstance(lora, int) and lora:
        # multi-head latent attention: the cache holds the compressed latent and the rope part
        per_kv = [lora + int(key("rope.dimension_count", 0) or 0) if h else 0 for h in kv_heads]
    else:
        per_kv = [h * (k_len + v_len) for h in kv_heads]
    recurrent = _recurrent_layers(arch, md, n_layer, kv_heads)
    r_elems = _recurrent_elems(arch, key, n_embd)
    swa = _swa_layers(arch, key, n_layer)
    window = int(key("attention.sliding_window", 0) or 0)
    kv_elems = sum(per_kv[il] for il in range(n_layer) if il not in recurrent and il not in swa)
    swa_elems = sum(per_kv[il] for il in range(n_layer) if il in swa and il not in recurrent)
    ff = _per_layer(key("feed_forward_length"), n_all, 0)
    n_ff = max(ff) if ff else 0
    used = int(key("expert_used_count", 0) or 0)
    if used:
        shared = int(key("expert_shared_feed_forward_length", 0) or 0) * max(1, int(key("expert_shared_count", 1) or 1))
        n_ff = max(n_ff, used * int(key("expert_feed_forward_length", 0) or 0) + shared)
    weight = sum(t[1] for t in tensors.values())
    by_type: dict[int, int] = {}
    for name, (dims, nbytes, ggml_type) in tensors.items():
        if len(dims) == 2 and name != "token_embd.weight":
            by_type[ggml_type] = by_type.get(ggml_type, 0) + nbytes
    embd = tensors.get("token_embd.weight")
    n_vocab = key("vocab_size")
    if not isinstance(n_vocab, int):
        n_vocab = embd[0][1] if embd is not None and len(embd[0]) > 1 else 0
    nextn_bytes = sum(t[1] for name, t in tensors.items() if _layer_of(name, -1) >= n_layer)
    return ModelShape(
        arch=arch, weight_bytes=weight, n_layers=n_layer, n_embd=n_embd, n_vocab=int(n_vocab), n_ff=n_ff, n_head=head,
        kv_elems=kv_elems, swa_kv_elems=swa_elems, swa_window=window if swa else 0,
        recurrent_elems=r_elems * len(recurrent),
        nextn_layers=nextn, nextn_kv_elems=sum(per_kv[n_layer:n_all]), nextn_weight_bytes=nextn_bytes,
        embd_bytes=embd[1] if embd is not None else 0, tied_embeddings=embd is not None and "output.weight" not in tensors,
        block_size=int(key("block_size", 0) or 0), matrix_types=tuple(sorted(by_type.items())),
        weight_elems=sum(_elems(t[0]) for t in tensors.values()),
        target_layers=len(key("target_layers") or []) if isinstance(key("target_layers"), list) else 0,
    )


def _layer_of(name: str, default: int) -> int:
    m = re.match(r"blk\.(\d+)\.", name)
    return int(m.group(1)) if m else default


def _recurrent_layers(arch: str, md: Mapping[str, Any], n_layer: int, kv_heads: Sequence[int]) -> set[int]:
    """The layers that keep recurrent state instead of a KV cache."""
    if arch in RECURRENT_ONLY:
        return set(range(n_layer))
    interval = md.get(f"{arch}.full_attention_interval")
    if isinstance(interval, int) and interval > 0:
        return {il for il in range(n_layer) if (il + 1) % interval != 0}
    if f"{arch}.ssm.conv_kernel" in md and isinstance(md.get(f"{arch}.attention.head_count_kv"), list):
        return {il for il in range(n_layer) if kv_heads[il] == 0}
    return set()


def _recurrent_elems(arch: str, key: Any, n_embd: int) -> int:
    """State elements of one recurrent layer for one sequence (llama.cpp's
    n_embd_r + n_embd_s)."""
    head_size = key("wkv.head_size")
    if isinstance(head_size, int) and head_size:
        return 2 * n_embd + n_embd * head_size
    d_conv = int(key("ssm.conv_kernel", 0) or 0)
    d_inner = int(key("ssm.inner_size", 0) or 0)
    d_state = int(key("ssm.state_size", 0) or 0)
    groups = int(key("ssm.group_count", 0) or 0)
    if not d_inner:
        return 0
    return max(0, d_conv - 1) * (d_inner + 2 * groups * d_state) + d_state * d_inner


def _swa_layers(arch: str, key: Any, n_layer: int) -> set[int]:
    if not key("attention.sliding_window"):
        return set()
    pattern = key("attention.sliding_window_pattern", SWA_PATTERNS.get(arch))
    if isinstance(pattern, list):
        return {il for il in range(min(n_layer, len(pattern))) if pattern[il]}
    if isinstance(pattern, int) and pattern > 1:
        return {il for il in range(n_layer) if il % pattern < pattern - 1}
    # a window with no pattern known: held as full attention (the larger figure)
    return set()


# -- MLX / Hugging Face directories ---------------------------------------------------


class _Tensor:
    __slots__ = ("name", "dtype", "shape", "nbytes")

    def __init__(self, name: str, dtype: str, shape: list[int], nbytes: int) -> None:
        self.name, self.dtype, self.shape, self.nbytes = name, dtype, shape, nbytes


def safetensors_tensors(path: Path) -> list[_Tensor]:
    """Every tensor a safetensors header lists, with its byte span."""
    header, _ = safetensors_header(path)
    out = []
    for name, info in header.items():
        if name == "__metadata__" or not isinstance(info, dict):
            continue
        begin, end = info.get("data_offsets", [0, 0])
        out.append(_Tensor(name, str(info.get("dtype")), list(info.get("shape") or []), int(end) - int(begin)))
    return out


def _config(path: Path) -> dict[str, Any]:
    config = path / "config.json"
    if not config.exists():
        raise ShapeUnknown(f"{path}: no config.json")
    if regular_file(config).st_size > MAX_CONFIG_BYTES:
        raise ModelFileError(f"{config}: too large for a config")
    # architecture sizes within the loader's bounds (a layer count of a billion is no model)
    check_config(config)
    data = json.loads(config.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ShapeUnknown(f"{config}: not a JSON object")
    text = data.get("text_config")
    return {**data, **text} if isinstance(text, dict) else data


def weights_only(tensors: Sequence[_Tensor]) -> ModelShape:
    """A bare safetensors file's (an MTP head's): its weights, nothing else known."""
    return ModelShape("safetensors", sum(t.nbytes for t in tensors), 0, 0, 0, 0, 0, 0, file_format="safetensors")


def directory_shape(path: Path) -> ModelShape:
    tensors = [t for f in sorted(path.glob("*.safetensors")) for t in safetensors_tensors(f)]
    if not tensors:
        raise ShapeUnknown(f"{path}: no tensors in safetensors files there")
    if not (path / "config.json").exists():
        return weights_only(tensors)
    cfg = _config(path)

    def num(*names: str, default: int = 0) -> int:
        for n in names:
            v = cfg.get(n)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
        return default

    n_layer = num("num_hidden_layers", "num_layers", "n_layer")
    n_embd = num("hidden_size", "d_model")
    if not n_layer or not n_embd:
        raise ShapeUnknown(f"{path}/config.json: num_hidden_layers or hidden_size missing")
    n_head = num("num_attention_heads", default=1)
    n_kv = num("num_key_value_heads", default=n_head)
    head_dim = num("head_dim", default=n_embd // max(1, n_head))
    kinds = _layer_kinds(cfg, n_layer)
    per_kv = n_kv * head_dim * 2
    kv = sum(per_kv for k in kinds if k == "full_attention")
    swa = sum(per_kv for k in kinds if k == "sliding_attention")
    k_heads, v_heads = num("linear_num_key_heads"), num("linear_num_value_heads")
    k_dim, v_dim = num("linear_key_head_dim"), num("linear_value_head_dim")
    conv = num("linear_conv_kernel_dim", default=4)
    linear = (conv - 1) * (2 * k_heads * k_dim + v_heads * v_dim) + v_heads * k_dim * v_dim
    n_ff = num("intermediate_size")
    used = num("num_experts_per_tok")
    if used:
        n_ff = max(n_ff, used * num("moe_intermediate_size") + num("shared_expert_intermediate_size"))
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    # quantized layers compute at their scales' width; float ones at the stored width
    widths = [_SAFETENSORS_WIDTH.get(t.dtype, 2) for t in tensors if t.dtype in _FLOATS]
    dtype_bytes = _DTYPE_BYTES.get(dtype, 2) if not widths else max(set(widths), key=widths.count)
    embd = sum(t.nbytes for t in tensors if "embed_tokens" in t.name)
    matrices = sum(_elems(t.shape) for t in tensors if len(t.shape) == 2 and t.dtype in _FLOATS
                   and t.name.endswith(".weight") and "norm" not in t.name)
    dflash = cfg.get("dflash_config")
    if not isinstance(dflash, dict):
        dflash = {}
    return ModelShape(
        arch=str(cfg.get("model_type") or "unknown"), weight_bytes=sum(t.nbytes for t in tensors), n_layers=n_layer,
        n_embd=n_embd, n_vocab=num("vocab_size"), n_ff=n_ff, n_head=n_head, kv_elems=kv, swa_kv_elems=swa,
        swa_window=num("sliding_window") if swa else 0,
        recurrent_elems=linear * sum(1 for k in kinds if k == "linear_attention"),
        embd_bytes=embd, tied_embeddings=bool(cfg.get("tie_word_embeddings", False)), dtype_bytes=dtype_bytes,
        block_size=int(dflash.get("block_size") or num("block_size")), matrix_elems=matrices,
        target_layers=len(dflash.get("target_layer_ids") or []),
        file_format="safetensors",
    )


def _elems(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _layer_kinds(cfg: Mapping[str, Any], n_layer: int) -> list[str]:
    """Each layer's kind: full_attention, sliding_attention or linear_attention."""
    types = cfg.get("layer_types")
    if isinstance(types, list) and len(types) >= n_layer:
        return ["linear_attention" if "linear" in str(t) else "sliding_attention" if "sliding" in str(t)
                else "full_attention" for t in types[:n_layer]]
    interval = cfg.get("full_attention_interval")
    if isinstance(interval, int) and interval > 0:
        return ["full_attention" if (il + 1) % interval == 0 else "linear_attention" for il in range(n_layer)]
    return ["full_attention"] * n_layer
