"""Model files checked before an engine opens them.

Engines parse GGUF and safetensors headers in native code that trusts them.
:func:`check_model` reads only the header, every count, length and offset
held to the file's size, and raises :class:`ModelFileError` naming the file
and the fault; it opens regular files only. Passing means parseable within
bounds, not correct."""

from __future__ import annotations

import json
import math
import os
import stat
import struct
from pathlib import Path
from typing import Any, BinaryIO, Mapping

# ggml's limits (ggml.h, llama-hparams.h): dimensions of one tensor, the
# bytes of a tensor name with its terminator, the layers a model may have.
GGML_MAX_DIMS = 4
GGML_MAX_NAME = 64
LLAMA_MAX_LAYERS = 512
# Keys longer than this are no key a loader looks up (the GGUF spec's bound).
MAX_KEY_BYTES = 65535
# One metadata string: a chat template or a merges line is far smaller.
MAX_STRING_BYTES = 64 << 20
# safetensors' own bound on its JSON header.
MAX_SAFETENSORS_HEADER = 100 << 20
# config.json is a few KB; architecture sizes past this are no model.
MAX_CONFIG_BYTES = 4 << 20
MAX_DIMENSION = 1 << 22
MAX_CONTEXT = 1 << 24
MAX_EXPERTS = 1 << 16

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_SAFETENSORS_DTYPES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "U16": 2, "I16": 2, "F16": 2,
    "BF16": 2, "U32": 4, "I32": 4, "F32": 4, "U64": 8, "I64": 8, "F64": 8, "F4": 1,
}
# config.json keys whose values size an architecture, and their bounds
_CONFIG_BOUNDS = {
    "num_hidden_layers": LLAMA_MAX_LAYERS, "num_layers": LLAMA_MAX_LAYERS, "n_layer": LLAMA_MAX_LAYERS,
    "hidden_size": MAX_DIMENSION, "intermediate_size": MAX_DIMENSION, "moe_intermediate_size": MAX_DIMENSION,
    "num_attention_heads": MAX_DIMENSION, "num_key_value_heads": MAX_DIMENSION, "head_dim": MAX_DIMENSION,
    "vocab_size": MAX_DIMENSION, "max_position_embeddings": MAX_CONTEXT, "num_experts": MAX_EXPERTS,
    "num_local_experts": MAX_EXPERTS, "n_routed_experts": MAX_EXPERTS, "block_size": MAX_DIMENSION,
}
# GGUF keys ({arch}.<suffix>) that size an architecture, and their bounds
_GGUF_BOUNDS = {
    "embedding_length": MAX_DIMENSION, "feed_forward_length": MAX_DIMENSION,
    "attention.head_count": MAX_DIMENSION, "attention.head_count_kv": MAX_DIMENSION,
    "attention.key_length": MAX_DIMENSION, "attention.value_length": MAX_DIMENSION,
    "vocab_size": MAX_DIMENSION, "context_length": MAX_CONTEXT, "expert_count": MAX_EXPERTS,
    "rope.dimension_count": MAX_DIMENSION, "nextn_predict_layers": LLAMA_MAX_LAYERS,
}


class ModelFileError(ValueError):
    """A model file an engine must not be given; the message names it."""


def regular_file(path: Path) -> os.stat_result:
    """``path``'s stat when it is a regular file (links followed), else
    ModelFileError: a FIFO or a device blocks or never ends when read."""
    try:
        st = path.stat()
    except OSError as exc:
        raise ModelFileError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):
        raise ModelFileError(f"{path}: not a regular file (a FIFO, device or socket is never a model)")
    return st


def check_model(path: Path | str) -> None:
    """Refuse (ModelFileError) a GGUF file, safetensors file or model
    directory whose headers an engine must not open."""
    p = Path(path)
    if p.is_dir():
        check_directory(p)
        return
    st = regular_file(p)
    with open(p, "rb") as f:
        head = f.read(4)
    if head == b"GGUF":
        check_gguf(p, st.st_size)
    elif p.suffix == ".safetensors":
        check_safetensors(p, st.st_size)
    elif p.suffix == ".gguf":
        raise ModelFileError(f"{p}: not a GGUF file (no GGUF magic)")


def check_directory(path: Path) -> None:
    """An MLX / Hugging Face model directory: config.json's sizes and every
    safetensors header."""
    config = path / "config.json"
    if config.exists() or config.is_symlink():
        check_config(config)
    for f in sorted(path.glob("*.safetensors")):
        check_safetensors(f)
    index = path / "model.safetensors.index.json"
    if index.exists() or index.is_symlink():
        _json_file(index)


def _json_file(path: Path) -> Any:
    st = regular_file(path)
    if st.st_size > MAX_CONFIG_BYTES:
        raise ModelFileError(f"{path}: {st.st_size:,} bytes, past the {MAX_CONFIG_BYTES:,} a model's JSON may have")
    try:
        return json.loads(path.read_bytes())
    except (ValueError, RecursionError) as exc:
        raise ModelFileError(f"{path}: not valid JSON ({str(exc)[:120]})") from None


def check_config(path: Path) -> None:
    """config.json's architecture sizes, nested configs (``text_config``) included."""
    _check_sizes(path, _json_file(path), "")


def _check_sizes(path: Path, obj: Any, where: str, depth: int = 0) -> None:
    if not isinstance(obj, Mapping) or depth > 4:
        return
    for key, value in obj.items():
        name = f"{where}{key}"
        if isinstance(value, Mapping):
            _check_sizes(path, value, f"{name}.", depth + 1)
            continue
        bound = _CONFIG_BOUNDS.get(str(key))
        if bound is None or value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise ModelFileError(f"{path}: {name} = {_short(value)} is no whole number")
        low = 0 if key in ("num_key_value_heads",) else 1
        if not low <= value <= bound:
            raise ModelFileError(f"{path}: {name} = {_short(value)} is outside {low}..{bound:,}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# -- safetensors ------------------------------------------------------------------


def safetensors_header(path: Path, size: int | None = None) -> tuple[dict[str, Any], int]:
    """A safetensors file's header (its 8-byte length held within the file
    and safetensors' own bound, then its JSON object) and the bytes of data
    after it."""
    if size is None:
        size = regular_file(path).st_size
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            raise ModelFileError(f"{path}: {size} bytes, too short for a safetensors header")
        (n,) = struct.unpack("<Q", raw)
        if n > min(size - 8, MAX_SAFETENSORS_HEADER):
            raise ModelFileError(f"{path}: the header claims {n:,} bytes; the file has {size:,}")
        text = f.read(n)
    try:
        header = json.loads(text)
    except (ValueError, RecursionError, UnicodeDecodeError):
        raise ModelFileError(f"{path}: the safetensors header is not valid JSON") from None
    if not isinstance(header, dict):
        raise ModelFileError(f"{path}: the safetensors header is not a JSON object")
    return header, size - 8 - n


def check_safetensors(path: Path, size: int | None = None) -> None:
    """The header (:func:`safetensors_header`), and every tensor's offsets
    inside the data and of the size its dtype and shape say."""
    header, data = safetensors_header(path, size)
    for name, info in header.items():
        if name == "__metadata__":
            continue
        what = f"{path}: tensor {_short(name)}"
        if not isinstance(info, dict):
            raise ModelFileError(f"{what} is described by no object")
        width = _SAFETENSORS_DTYPES.get(str(info.get("dtype")))
        shape, offsets = info.get("shape"), info.get("data_offsets")
        if width is None:
            raise ModelFileError(f"{what} has an unknown dtype {_short(info.get('dtype'))}")
        if not (isinstance(shape, list) and len(shape) <= 8 and all(_whole(d) for d in shape)):
            raise ModelFileError(f"{what} has a bad shape {_short(shape)}")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(_whole(o) for o in offsets)):
            raise ModelFileError(f"{what} has bad data offsets {_short(offsets)}")
        begin, end = offsets
        if not begin <= end <= data:
            raise ModelFileError(f"{what} lies at bytes {begin:,}..{end:,}, outside the {data:,} of data")
        count = math.prod(shape)
        # F4 packs two values a byte
        need = (count + 1) // 2 if info.get("dtype") == "F4" else count * width
        if need != end - begin:
            raise ModelFileError(f"{what}: shape {shape} needs {need:,} bytes, its offsets span {end - begin:,}")


def _whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 62


# -- GGUF ---------------------------------------------------------------------------


class _Reader:
    """Reads a GGUF header, every length checked against what is left."""

    def __init__(self, f: BinaryIO, path: Path, size: int) -> None:
        self.f, self.path, self.size = f, path, size

    def fail(self, what: str) -> ModelFileError:
        return ModelFileError(f"{self.path}: {what} (at byte {self.f.tell():,} of {self.size:,})")

    def left(self) -> int:
        return self.size - self.f.tell()

    def take(self, n: int, what: str) -> bytes:
        if n > self.left():
            raise self.fail(f"{what} claims {n:,} bytes, past the end of the file")
        data = self.f.read(n)
        if len(data) != n:
            raise self.fail(f"{what} is cut short")
        return data

    def unpack(self, fmt: str, what: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str, cap: int = MAX_STRING_BYTES) -> bytes:
        n = self.unpack("<Q", f"the length of {what}")
        if n > cap:
            raise self.fail(f"{what} claims {n:,} bytes (at most {cap:,})")
        return self.take(n, what)

    def value(self, vtype: int, key: str, depth: int = 0) -> Any:
        if vtype == _STRING:
            return self.string(f"the value of {key}").decode("utf-8", errors="replace")
        fmt = _SCALARS.get(vtype)
        if fmt is not None:
            return self.unpack(fmt, f"the value of {key}")
        if vtype == _ARRAY and depth == 0:
            sub = self.unpack("<I", f"the element type of {key}")
            n = self.unpack("<Q", f"the length of {key}")
            least = struct.calcsize(_SCALARS[sub]) if sub in _SCALARS else 8 if sub == _STRING else None
            if least is None:
                raise self.fail(f"{key} is an array of unknown type {sub}")
            if n * least > self.left():
                raise self.fail(f"{key} claims {n:,} elements, more than the file holds")
            if sub in _SCALARS:
                data = self.take(n * least, f"the elements of {key}")
                # only short integer arrays are kept: the loader's per-layer sizes
                if n <= LLAMA_MAX_LAYERS and sub not in (6, 12):
                    return list(struct.unpack(f"<{n}{_SCALARS[sub][1]}", data))
                return None
            for _ in range(n):
                self.string(f"an element of {key}")
            return None
        raise self.fail(f"{key} has unknown value type {vtype}")


def read_gguf_header(path: Path | str) -> tuple[dict[str, Any], list[tuple[str, tuple[int, ...], int, int]]]:
    """A GGUF's metadata (scalars, strings, short integer arrays; other
    arrays as None) and its tensors (name, dims, type, offset), every
    field checked (:func:`check_gguf` does the checks that relate them)."""
    p = Path(path)
    size = regular_file(p).st_size
    with open(p, "rb") as f:
        return _read(_Reader(f, p, size))


def _read(r: _Reader) -> tuple[dict[str, Any], list[tuple[str, tuple[int, ...], int, int]]]:
    if r.take(4, "the magic") != b"GGUF":
        raise r.fail("not a GGUF file (no GGUF magic)")
    version = r.unpack("<I", "the version")
    if version not in (2, 3):
        raise r.fail(f"GGUF version {version} (2 or 3 are read)")
    n_tensors = r.unpack("<Q", "the tensor count")
    n_kv = r.unpack("<Q", "the key-value count")
    # each key-value takes at least 13 bytes, each tensor 28: a count the file cannot hold is a lie
    if n_kv * 13 > r.left():
        raise r.fail(f"the header claims {n_kv:,} key-value pairs, more than the file can hold")
    if n_tensors * 28 > r.left():
        raise r.fail(f"the header claims {n_tensors:,} tensors, more than the file can hold")
    md: dict[str, Any] = {}
    for _ in range(n_kv):
        key = r.string("a key", MAX_KEY_BYTES).decode("utf-8", errors="replace")
        vtype = r.unpack("<I", f"the type of {key}")
        md[key] = r.value(vtype, key)
    tensors: list[tuple[str, tuple[int, ...], int, int]] = []
    for _ in range(n_tensors):
        name = r.string("a tensor name", GGML_MAX_NAME - 1).decode("utf-8", errors="replace")
        n_dims = r.unpack("<I", f"the dimension count of {name}")
        if not 1 <= n_dims <= GGML_MAX_DIMS:
            raise r.fail(f"tensor {name} has {n_dims:,} dimensions (ggml allows 1..{GGML_MAX_DIMS})")
        dims = tuple(r.unpack("<Q", f"a dimension of {name}") for _ in range(n_dims))
        ttype = r.unpack("<I", f"the type of {name}")
        offset = r.unpack("<Q", f"the offset of {name}")
        tensors.append((name, dims, ttype, offset))
    md["__data_start__"] = r.f.tell()
    return md, tensors


def _ggml_types() -> dict[int, tuple[int, int]]:
    """ggml type id -> (elements per block, bytes per block), as the gguf
    package (llama.cpp's own) defines them; the bounds checks here are ours."""
    from gguf.constants import GGML_QUANT_SIZES

    return {int(k): (int(v[0]), int(v[1])) for k, v in GGML_QUANT_SIZES.items()}


def check_gguf(path: Path | str, size: int | None = None) -> dict[str, Any]:
    """Refuse a GGUF whose header an engine cannot safely take; returns its
    metadata (as :func:`read_gguf_header` keeps it)."""
    p = Path(path)
    md, tensors = read_gguf_header(p)
    if size is None:
        size = p.stat().st_size
    align = md.get("general.alignment", 32)
    if not isinstance(align, int) or align <= 0 or align & (align - 1) or align > 1 << 20:
        raise ModelFileError(f"{p}: general.alignment = {_short(align)} is no power of two")
    start = -(-int(md.pop("__data_start__")) // align) * align
    seen: set[str] = set()
    for name, dims, ttype, offset in tensors:
        if name in seen:
            raise ModelFileError(f"{p}: tensor {name} appears twice")
        seen.add(name)
        count = 1
        for d in dims:
            count *= d
            if count >= 1 << 62:
                raise ModelFileError(f"{p}: tensor {name} has dimensions {dims} past 2^62 elements")
        if offset % align:
            raise ModelFileError(f"{p}: tensor {name}'s offset {offset:,} is not aligned to {align}")
        block = _ggml_types().get(ttype)
        if block is None:
            raise ModelFileError(f"{p}: tensor {name} has unknown ggml type {ttype}")
        elems, width = block
        if dims[0] % elems:
            raise ModelFileError(f"{p}: tensor {name}'s first dimension {dims[0]:,} is not a multiple of "
                                 f"its type's block of {elems}")
        nbytes = count // elems * width
        if start + offset + nbytes > size:
            raise ModelFileError(f"{p}: tensor {name} at offset {offset:,} ({nbytes:,} bytes) runs past the end "
                                 f"of the file ({size:,} bytes)")
    _check_arch(p, md, len(tensors))
    return md


def _check_arch(p: Path, md: Mapping[str, Any], n_tensors: int) -> None:
    arch = md.get("general.architecture")
    if not isinstance(arch, str):
        return
    blocks = md.get(f"{arch}.block_count")
    if blocks is not None:
        # every layer holds at least one tensor
        top = min(LLAMA_MAX_LAYERS, n_tensors)
        if not isinstance(blocks, int) or isinstance(blocks, bool) or not 1 <= blocks <= top:
            raise ModelFileError(f"{p}: {arch}.block_count = {_short(blocks)}, outside 1..{top} "
                                 f"(the file has {n_tensors} tensors)")
    for suffix, bound in _GGUF_BOUNDS.items():
        key = f"{arch}.{suffix}"
        value = md.get(key)
        for v in value if isinstance(value, list) else [value]:
            if v is None:
                continue
            if not isinstance(v, int) or not 0 <= v <= bound:
                raise ModelFileError(f"{p}: {key} = {_short(v)} is outside 0..{bound:,}")

