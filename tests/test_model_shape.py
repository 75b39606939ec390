"""Model shapes read from headers alone (lab.kit.model_shape): the embedded
GGUF as llama.cpp sizes it, a hybrid with recurrent layers and an MTP
block, MLX directories, split GGUFs, and files that do not tell."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lab.base.footprint import ModelLoad, llama_kv_bytes
from lab.kit import models
from lab.kit.model_shape import ShapeUnknown, read_shape


@pytest.fixture(scope="module")
def built(registry):  # the conftest's registry installs the built-in models
    return models.resolve


def test_the_embedded_gguf_reads_as_llama_cpp_loads_it() -> None:
    shape = read_shape(models.embedded_smollm2())
    # llama.cpp: "CPU_Mapped model buffer size = 92.10 MiB"
    assert shape.weight_bytes / 2**20 == pytest.approx(92.10, abs=0.01)
    assert (shape.arch, shape.n_layers, shape.n_embd, shape.n_vocab, shape.n_ff) == ("llama", 30, 576, 49152, 1536)
    assert shape.kv_elems == 30 * 3 * 64 * 2 and shape.recurrent_elems == 0
    assert shape.tied_embeddings and shape.embd_bytes == 49152 * 576 // 32 * 34  # Q8_0
    assert shape.weight_elems > 134_000_000 and shape.file_format == "gguf"


def test_a_hybrid_reads_its_recurrent_layers_and_mtp_block(built) -> None:
    shape = read_shape(built("synthetic:qwen35-tiny"))
    # 4 layers, every 4th attention: 3 delta-net layers of (4-1) x (128 + 2*2*32) + 32*128 f32 each
    assert shape.n_layers == 4 and shape.nextn_layers == 1
    assert shape.recurrent_elems == 3 * (3 * (128 + 2 * 2 * 32) + 32 * 128)
    assert shape.kv_elems == 1 * 2 * 64 * 2 and shape.nextn_kv_elems == 2 * 64 * 2
    assert 0 < shape.nextn_weight_bytes < shape.weight_bytes
    # llama.cpp logged "CPU KV buffer size = 2.00 MiB" at 4096 cells
    assert llama_kv_bytes(shape, ModelLoad("target", "m", 4096))[0] == 2 << 20


def test_mlx_directories_read_their_config_and_safetensors(built) -> None:
    qwen3 = read_shape(built("tiny:qwen3"))
    assert qwen3.file_format == "safetensors" and qwen3.n_layers == 4
    assert qwen3.kv_elems == 4 * 2 * 16 * 2 and qwen3.n_vocab == 260 and qwen3.dtype_bytes == 4
    hybrid = read_shape(built("tiny:qwen3.5-hybrid"))
    # text_config: every 2nd layer attends, the others keep (4-1) x (2*2*16 + 4*16) + 4*16*16 state
    assert hybrid.kv_elems == 2 * 2 * 16 * 2
    assert hybrid.recurrent_elems == 2 * (3 * (2 * 2 * 16 + 4 * 16) + 4 * 16 * 16)
    dflash = read_shape(built("tiny:qwen3-dflash"))
    assert dflash.block_size == 4 and dflash.n_layers == 2
    head = read_shape(built("tiny:qwen3-mtp"))
    # a bare head: its weights, nothing else known
    assert head.weight_bytes > 0 and head.n_layers == 0


def _gguf(path: Path, tensors: dict[str, np.ndarray], meta: bool) -> None:
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    if meta:
        w.add_block_count(1)
        w.add_embedding_length(8)
        w.add_head_count(2)
        w.add_head_count_kv(1)
        w.add_feed_forward_length(16)
    for name, data in tensors.items():
        w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_a_split_gguf_counts_every_file(tmp_path: Path) -> None:
    pytest.importorskip("gguf", reason="the gguf package writes the split files (bash scripts/setup.sh llamacpp)")
    first = tmp_path / "m-00001-of-00002.gguf"
    _gguf(first, {"token_embd.weight": np.zeros((32, 8), np.float32)}, meta=True)
    _gguf(tmp_path / "m-00002-of-00002.gguf", {"blk.0.ffn_up.weight": np.zeros((16, 8), np.float32)}, meta=False)
    shape = read_shape(first)
    assert shape.weight_bytes >= (32 * 8 + 16 * 8) * 4
    assert shape.kv_elems == 1 * 4 * 2 and shape.n_vocab == 32


def test_files_that_do_not_tell_are_refused_saying_why(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ShapeUnknown, match="no tensors"):
        read_shape(tmp_path / "empty")
    text = tmp_path / "model.bin"
    text.write_bytes(b"not a model")
    with pytest.raises(ShapeUnknown, match="neither a GGUF"):
        read_shape(text)
    config_only = tmp_path / "d"
    config_only.mkdir()
    (config_only / "config.json").write_text(json.dumps({"hidden_size": 8}))
    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    (config_only / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + bytes(8))
    with pytest.raises(ShapeUnknown, match="num_hidden_layers"):
        read_shape(config_only)
