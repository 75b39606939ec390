"""Hostile model files: malformed GGUF headers, mutated valid GGUFs, bad
safetensors directories and special files, given to the in-process stacks
(the target, and a DFlash draft through ``options.draft``). Each is refused
before an engine sees it, as an error row naming the file and what is
wrong; the other arm runs, report.md is written, in bounded time and RSS.

The unit tests check the header reader itself (lab.kit.model_files) over
every generated case; the contained runs go through the real runner in a
child process, so a crash the lab failed to contain fails the test, not the
session.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import time
from pathlib import Path
from typing import Callable

import pytest

from lab.kit.model_files import ModelFileError, check_model
from tests.hostile_gen import (
    ARRAY,
    STRING,
    U32,
    contained_run,
    gguf_bytes,
    kv,
    llama_kvs,
    patch_u32,
    small_gguf,
    tensor_info,
)

GiB = 1 << 30

# name -> (bytes of the file, words the refusal must hold)
Case = tuple[Callable[[], bytes], tuple[str, ...]]
GGUF_CASES: dict[str, Case] = {
    "tensors-2^63-1": (lambda: gguf_bytes(llama_kvs(), [], n_tensors=(1 << 63) - 1), ("tensors",)),
    "tensors-2^64-1": (lambda: gguf_bytes(llama_kvs(), [], n_tensors=(1 << 64) - 1), ("tensors",)),
    "kv-2^63-1": (lambda: gguf_bytes(llama_kvs(), [], n_kv=(1 << 63) - 1), ("key-value",)),
    "kv-2^64-1": (lambda: gguf_bytes(llama_kvs(), [], n_kv=(1 << 64) - 1), ("key-value",)),
    "key-1TB": (lambda: gguf_bytes([struct.pack("<Q", 1 << 40) + b"general.architecture"], []), ("a key",)),
    "string-1TB": (lambda: gguf_bytes([kv("general.architecture", U32, 0)[:-4].replace(
        struct.pack("<I", U32), struct.pack("<I", STRING)) + struct.pack("<Q", 1 << 40)], []), ("claims",)),
    "random-after-magic": (lambda: b"GGUF" + bytes((i * 7919 + 13) % 251 for i in range(4096)), ("GGUF",)),
    "version-0": (lambda: gguf_bytes(llama_kvs(), [], version=0), ("version",)),
    "dims-64": (lambda: gguf_bytes(llama_kvs(), [tensor_info("t.weight", (1,) * 64)]), ("64 dimensions",)),
    "dims-1000": (lambda: gguf_bytes(llama_kvs(), [tensor_info("t.weight", (1,) * 1000)]), ("1,000 dimensions",)),
    "dims-0": (lambda: gguf_bytes(llama_kvs(), [tensor_info("t.weight", ())]), ("0 dimensions",)),
    "dims-product-overflow": (lambda: gguf_bytes(llama_kvs(), [tensor_info("t.weight", (1 << 40, 1 << 40))]),
                              ("2^62",)),
    "offset-past-end": (lambda: gguf_bytes(llama_kvs(), [tensor_info("t.weight", (8,), offset=1 << 40)]),
                        ("past the end",)),
    "size-past-end": (lambda: gguf_bytes(llama_kvs(), [tensor_info("t.weight", (1 << 30,))]), ("past the end",)),
    "unaligned-offset": (lambda: gguf_bytes(llama_kvs(), [tensor_info("t.weight", (8,), offset=3)], data=b"\0" * 64),
                         ("aligned",)),
    "unknown-type": (lambda: gguf_bytes(llama_kvs(), [tensor_info("t.weight", (8,), ttype=999)], data=b"\0" * 64),
                     ("unknown ggml type",)),
    "q4-not-blocked": (lambda: gguf_bytes(llama_kvs(), [tensor_info("t.weight", (33,), ttype=2)], data=b"\0" * 64),
                       ("multiple",)),
    "name-past-64": (lambda: gguf_bytes(llama_kvs(), [tensor_info("t" * 200, (8,))], data=b"\0" * 64),
                     ("tensor name",)),
    "array-2^60": (lambda: gguf_bytes([kv("general.architecture", STRING, "llama"),
                                       kv("tokenizer.ggml.tokens", ARRAY, (STRING, []))[:-8] + struct.pack("<Q", 1 << 60)],
                                      []), ("elements",)),
    "block-count-0": (lambda: small_gguf(block_count=0), ("block_count",)),
    "block-count-1e9": (lambda: small_gguf(block_count=10 ** 9), ("block_count",)),
    "hidden-2^31": (lambda: gguf_bytes([*llama_kvs()[:2], kv("llama.embedding_length", U32, 1 << 31)],
                                       [tensor_info("t.weight", (8,))], data=b"\0" * 64), ("embedding_length",)),
    "duplicate-tensor": (lambda: gguf_bytes(llama_kvs(), [tensor_info("t.weight", (8,)), tensor_info("t.weight", (8,))],
                                            data=b"\0" * 64), ("twice",)),
}


@pytest.mark.parametrize("name", sorted(GGUF_CASES))
def test_every_malformed_gguf_is_refused_by_the_header_check(tmp_path: Path, name: str) -> None:
    make, words = GGUF_CASES[name]
    path = tmp_path / f"{name}.gguf"
    path.write_bytes(make())
    import gguf.constants  # noqa: F401 - its first import (numpy's) is not the check's time

    t0 = time.monotonic()
    with pytest.raises(ModelFileError) as info:
        check_model(path)
    # a bound on reading a hostile header (no loop over what it claims), not a speed target
    assert time.monotonic() - t0 < 5
    msg = str(info.value)
    assert msg.startswith(str(path)), msg
    for w in words:
        assert w in msg, msg


def test_a_well_formed_header_passes(tmp_path: Path) -> None:
    """The generator's good file passes: each case above fails for its own fault."""
    path = tmp_path / "good.gguf"
    path.write_bytes(small_gguf())
    check_model(path)


def test_the_embedded_model_passes_in_bounded_time() -> None:
    from lab.kit.models import embedded_smollm2

    try:
        path = embedded_smollm2()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    t0 = time.monotonic()
    check_model(path)
    assert time.monotonic() - t0 < 5


def test_a_fifo_is_refused_without_opening_it(tmp_path: Path) -> None:
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    with pytest.raises(ModelFileError, match="not a regular file"):
        check_model(fifo)
    assert time.monotonic() - t0 < 1


# -- safetensors and MLX directories ------------------------------------------------------


def safetensors(header: dict[str, object] | bytes, data: bytes = b"", claimed: int | None = None) -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(raw) if claimed is None else claimed) + raw + data


def mlx_dir(root: Path, config: dict[str, object], weights: bytes) -> Path:
    root.mkdir()
    (root / "config.json").write_text(json.dumps(config))
    (root / "model.safetensors").write_bytes(weights)
    return root


GOOD_CONFIG = {"model_type": "qwen3", "num_hidden_layers": 2, "hidden_size": 16, "vocab_size": 100}
GOOD_WEIGHTS = safetensors({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}, b"\0" * 16)

DIR_CASES: dict[str, tuple[dict[str, object], bytes, str]] = {
    "layers-2^40": ({**GOOD_CONFIG, "num_hidden_layers": 1 << 40}, GOOD_WEIGHTS, "num_hidden_layers"),
    "nested-layers-2^40": ({**GOOD_CONFIG, "text_config": {"num_hidden_layers": 1 << 40}}, GOOD_WEIGHTS,
                           "text_config.num_hidden_layers"),
    "hidden-string": ({**GOOD_CONFIG, "hidden_size": "big"}, GOOD_WEIGHTS, "hidden_size"),
    "header-2^63": (GOOD_CONFIG, safetensors(b"{}", claimed=1 << 63), "header claims"),
    "header-past-file": (GOOD_CONFIG, safetensors(b"{}", claimed=4096), "header claims"),
    "offsets-past-data": (GOOD_CONFIG, safetensors({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 1 << 40]}},
                                                   b"\0" * 16), "outside"),
    "shape-mismatch": (GOOD_CONFIG, safetensors({"w": {"dtype": "F32", "shape": [1 << 20], "data_offsets": [0, 16]}},
                                                b"\0" * 16), "needs"),
    "header-not-json": (GOOD_CONFIG, safetensors(b"\xff" * 16), "not valid JSON"),
    "unknown-dtype": (GOOD_CONFIG, safetensors({"w": {"dtype": "Q9", "shape": [4], "data_offsets": [0, 4]}}, b"\0" * 4),
                      "dtype"),
}


@pytest.mark.parametrize("name", sorted(DIR_CASES))
def test_every_bad_mlx_directory_is_refused(tmp_path: Path, name: str) -> None:
    config, weights, word = DIR_CASES[name]
    d = mlx_dir(tmp_path / name, config, weights)
    with pytest.raises(ModelFileError) as info:
        check_model(d)
    assert str(d) in str(info.value) and word in str(info.value), info.value


def test_a_good_mlx_directory_passes(tmp_path: Path) -> None:
    check_model(mlx_dir(tmp_path / "good", GOOD_CONFIG, GOOD_WEIGHTS))


def test_a_fifo_in_place_of_safetensors_is_refused(tmp_path: Path) -> None:
    d = mlx_dir(tmp_path / "m", GOOD_CONFIG, GOOD_WEIGHTS)
    (d / "model.safetensors").unlink()
    os.mkfifo(d / "model.safetensors")
    with pytest.raises(ModelFileError, match="not a regular file"):
        check_model(d)


# -- through the runner: one row lost, never the run ----------------------------------------

RUN_HEAD = """
[profile]
name = "hostile-models"
[run]
max_tokens = 8
rounds = 1
warmup = 0
probe = false
memory_interval_s = 0.05
allow_outside_paths = true
[[prompts]]
name = "p"
text = "Write about tides."
[[arms]]
name = "base"
backend = "fake"
options = { virtual_clock = true }
"""


def _mlx_arm(model: Path, backend: str = "mlx", draft: Path | None = None) -> str:
    opts = f'options = {{ draft = "{draft}" }}\n' if draft is not None else ""
    return f'[[arms]]\nname = "bad"\nbackend = "{backend}"\nmodel = "{model}"\n{opts}'


def _assert_one_row_lost(tmp_path: Path, arm: str, *words: str) -> None:
    got = contained_run(RUN_HEAD + arm, tmp_path)
    assert got.rc == 0, got.stderr
    rows = {r["arm"]: r for r in got.rows}
    assert rows["base"]["status"] == "ok"
    assert rows["bad"]["status"] == "error", rows["bad"]
    for w in words:
        assert w in rows["bad"]["detail"], rows["bad"]["detail"]
    assert got.report_md
    assert got.seconds < 60, got.seconds
    assert got.rss_bytes < 2 * GiB, got.rss_bytes


MLX_RUN_CASES = ["tensors-2^63-1", "kv-2^64-1", "key-1TB", "random-after-magic", "dims-64", "dims-1000",
                 "block-count-1e9"]


@pytest.mark.slow
@pytest.mark.parametrize("name", MLX_RUN_CASES)
def test_a_malformed_gguf_on_mlx_costs_one_row(tmp_path: Path, name: str) -> None:
    pytest.importorskip("mlx.core", reason="MLX is not installed here (bash scripts/setup.sh mlx)")
    path = tmp_path / f"{name}.gguf"
    path.write_bytes(GGUF_CASES[name][0]())
    _assert_one_row_lost(tmp_path, _mlx_arm(path), str(path))


def _mutated(tmp_path: Path, ref: str, key: str, value: int) -> Path:
    from lab.kit import models
    from lab.registry import load_registry

    load_registry()
    try:
        src = models.resolve(ref)
    except Exception as exc:  # noqa: BLE001 - a model this machine cannot build skips the case
        pytest.skip(f"{ref} cannot be built here: {exc}")
    out = tmp_path / f"{src.stem}-{key}-{value}.gguf"
    shutil.copyfile(src, out)
    patch_u32(out, key, value)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("value", [0, 10 ** 9])
def test_a_mutated_dflash_draft_costs_one_row(tmp_path: Path, value: int) -> None:
    pytest.importorskip("mlx.core", reason="MLX is not installed here (bash scripts/setup.sh mlx)")
    draft = _mutated(tmp_path, "tiny:llama-dflash", "dflash.block_count", value)
    from lab.kit import models

    target = models.resolve("tiny:llama")
    _assert_one_row_lost(tmp_path, _mlx_arm(target, "mlx-dflash", draft) + "n_max = 3\n", str(draft), "block_count")


@pytest.mark.slow
def test_a_fifo_as_mlx_weights_costs_one_row(tmp_path: Path) -> None:
    pytest.importorskip("mlx.core", reason="MLX is not installed here (bash scripts/setup.sh mlx)")
    d = mlx_dir(tmp_path / "m", GOOD_CONFIG, GOOD_WEIGHTS)
    (d / "model.safetensors").unlink()
    os.mkfifo(d / "model.safetensors")
    _assert_one_row_lost(tmp_path, _mlx_arm(d), "not a regular file")


@pytest.mark.slow
def test_2_to_the_40_layers_in_config_json_costs_one_row(tmp_path: Path) -> None:
    pytest.importorskip("mlx.core", reason="MLX is not installed here (bash scripts/setup.sh mlx)")
    d = mlx_dir(tmp_path / "m", {**GOOD_CONFIG, "num_hidden_layers": 1 << 40}, GOOD_WEIGHTS)
    _assert_one_row_lost(tmp_path, _mlx_arm(d), "num_hidden_layers")


@pytest.mark.slow
@pytest.mark.parametrize("value", [0, 10 ** 9])
def test_a_block_count_llama_cpp_aborts_on_costs_one_row(tmp_path: Path, value: int) -> None:
    try:
        import llama_cpp  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - a wheel without its library raises FileNotFoundError
        pytest.skip(f"llama-cpp-python is not usable here: {exc} (bash scripts/setup.sh llamacpp)")
    model = _mutated(tmp_path, "tiny:llama", "llama.block_count", value)
    arm = f'[[arms]]\nname = "bad"\nbackend = "llamacpp"\nmodel = "{model}"\n'
    _assert_one_row_lost(tmp_path, arm, str(model), "block_count")


def test_reading_a_chat_template_refuses_a_lying_header_first(tmp_path: Path) -> None:
    """The template reader runs in the lab's own process (a llama-server
    arm's prompt too): a key of 1 TB must not be read as one."""
    from lab.kit.prompting import PromptError, render_prompt

    path = tmp_path / "key.gguf"
    path.write_bytes(GGUF_CASES["key-1TB"][0]())
    t0 = time.monotonic()
    with pytest.raises(PromptError, match="a key claims"):
        render_prompt(path, "hi", None, True)
    assert time.monotonic() - t0 < 2


@pytest.mark.slow
def test_a_fifo_as_a_dflash_draft_costs_one_row(tmp_path: Path) -> None:
    pytest.importorskip("mlx.core", reason="MLX is not installed here (bash scripts/setup.sh mlx)")
    from lab.kit import models
    from lab.registry import load_registry

    load_registry()
    target = models.resolve("tiny:llama")
    fifo = tmp_path / "draft.gguf"
    os.mkfifo(fifo)
    _assert_one_row_lost(tmp_path, _mlx_arm(target, "mlx-dflash", fifo) + "n_max = 3\n", "not a regular file")
