"""The memory arithmetic (lab.base.footprint), held to what llama.cpp itself
logs for the same shapes and settings, and to the rules it follows.

The compute-buffer figures below are llama.cpp's own ``sched_reserve: CPU
compute buffer size`` lines (llama-cpp-python 0.3.36's llama.cpp, this
machine), for four of the project's models at n_ctx 4096; the KV, recurrent
and model buffer figures its ``KV buffer``, ``RS buffer`` and ``model
buffer`` lines. tests/test_memory_estimate.py reads the same lines live."""

from __future__ import annotations

import dataclasses

import pytest

from lab.base.footprint import (
    LLAMA_CPP,
    MLX,
    VLLM,
    MemoryNeeds,
    ModelLoad,
    ModelShape,
    at_lengths,
    estimate,
    kv_type_bytes,
    llama_cells,
    llama_compute_bytes,
    llama_kv_bytes,
    llama_parts,
    recurrent_bytes,
    size_text,
)

MIB = 1 << 20

# Shapes as lab.kit.model_shape reads them from the files (test_model_shape holds the reader to them).
SMOLLM2 = ModelShape("llama", 96_576_768, 30, 576, 49152, 1536, 9, kv_elems=11520, embd_bytes=30_081_024,
                     tied_embeddings=True)
TINY_LLAMA = ModelShape("llama", 6_440_192, 2, 64, 49152, 128, 4, kv_elems=128, embd_bytes=6_291_456,
                        tied_embeddings=True)
TINY_GEMMA3 = ModelShape("gemma3", 27_404_288, 2, 256, 49152, 512, 4, kv_elems=128, swa_kv_elems=128,
                         swa_window=64, embd_bytes=25_165_824, tied_embeddings=True)
QWEN35_TINY = ModelShape("qwen35", 1_932_864, 4, 256, 640, 512, 4, kv_elems=256, recurrent_elems=14592,
                         nextn_layers=1, nextn_kv_elems=256, embd_bytes=92160)
# The write-ups' target's shape (synthetic:qwen35-27b, Qwen3.x-27B: 64 layers, 48 of them gated
# delta-net with 16 key heads, 48 value heads of 128, conv kernel 4) at UD-Q4_K_S's 15.36 GB.
QWEN35_27B = ModelShape("qwen35", 15_360_000_000, 64, 5120, 248320, 17408, 24, kv_elems=16 * 4 * 256 * 2,
                        recurrent_elems=48 * (3 * (6144 + 2 * 16 * 128) + 128 * 6144), nextn_layers=1,
                        nextn_kv_elems=4 * 256 * 2, embd_bytes=700_000_000)


# the synthetic models the GPU runs used, as far as the compute reserve reads them
LLAMA_8B = ModelShape("llama", 4_517_937_152, 32, 4096, 128256, 14336, 32, kv_elems=65536)
LLAMA_1B = ModelShape("llama", 843_128_832, 16, 2048, 128256, 8192, 32, kv_elems=16384)
DFLASH_27B = ModelShape("dflash", 973_460_480, 5, 5120, 248320, 17408, 32, kv_elems=10240, target_layers=5)


def load(**kw: object) -> ModelLoad:
    return ModelLoad("target", "m", **kw)  # type: ignore[arg-type]


# (shape, n_ctx, n_ubatch, n_outputs, flash attention, other settings, llama.cpp's logged MiB): this
# CPU's in-process contexts at n_ctx 4096, then llama-server on an H100 (results/twins-h100,
# results/every-stack-h100: the servers' logs)
LOGGED_COMPUTE = [
    (SMOLLM2, 4096, 512, 512, True, {}, 98.25), (SMOLLM2, 4096, 512, 1, True, {}, 17.51),
    (SMOLLM2, 4096, 128, 128, True, {}, 24.56), (SMOLLM2, 4096, 512, 512, False, {}, 99.38),
    (TINY_LLAMA, 4096, 512, 512, True, {}, 96.25), (TINY_LLAMA, 4096, 512, 1, True, {}, 5.01),
    (TINY_LLAMA, 4096, 128, 128, True, {}, 24.06),
    (TINY_GEMMA3, 4096, 512, 512, True, {}, 98.5), (TINY_GEMMA3, 4096, 512, 1, True, {}, 10.52),
    (TINY_GEMMA3, 4096, 128, 128, True, {}, 24.63),
    (QWEN35_TINY, 4096, 512, 512, True, {}, 8.52), (QWEN35_TINY, 4096, 128, 128, True, {}, 2.13),
    (QWEN35_TINY, 4096, 512, 512, False, {}, 43.52),
    (LLAMA_8B, 2048, 512, 1, True, {}, 110.01), (LLAMA_1B, 2048, 512, 1, True, {}, 62.01),
    (QWEN35_27B, 8192, 512, 4, True, {}, 130.02),
    # handing 5 layers' hidden states to a DFlash draft
    (QWEN35_27B, 8192, 512, 4, True, {"extract_layers": 5}, 180.02),
    # the DFlash draft: a batch of outputs, sampled in the graph (its second reserve) and not
    (DFLASH_27B, 8192, 512, 512, True, {"device_sampling": True}, 980.95),
    (DFLASH_27B, 8192, 512, 512, True, {}, 495.00),
]


@pytest.mark.parametrize("shape,n_ctx,ub,outputs,flash,more,logged", LOGGED_COMPUTE)
def test_the_compute_reserve_is_within_15_percent_of_what_llama_cpp_logs(
        shape: ModelShape, n_ctx: int, ub: int, outputs: int, flash: bool, more: dict[str, object],
        logged: float) -> None:
    reserved, resident, _ = llama_compute_bytes(
        shape, load(n_ctx=n_ctx, n_ubatch=ub, n_outputs=outputs, flash_attn=flash, **more))
    assert reserved / MIB == pytest.approx(logged, rel=0.15)
    assert resident <= reserved


def test_the_kv_cache_is_what_llama_cpp_allocates() -> None:
    # SmolLM2 at 4096 cells: "llama_kv_cache: size = 90.00 MiB"; 512 cells: 11.25 MiB
    assert llama_kv_bytes(SMOLLM2, load(n_ctx=4096))[0] == 90 * MIB
    assert llama_kv_bytes(SMOLLM2, load(n_ctx=512))[0] == int(11.25 * MIB)
    # a context is padded to 256 cells
    assert llama_cells(1) == 256 and llama_cells(4097) == 4352
    assert llama_kv_bytes(SMOLLM2, load(n_ctx=4000))[0] == 90 * MIB
    # a quantized cache: q8_0 holds 34 bytes a 32 elements
    assert llama_kv_bytes(SMOLLM2, load(n_ctx=4096, kv_type="q8_0"))[0] == int(90 * MIB * 34 / 64)
    with pytest.raises(ValueError, match="unknown KV cache type"):
        kv_type_bytes("q3_x")


def test_sliding_window_layers_keep_a_window_unless_full_size() -> None:
    # The library's default (the lab's in-process context) keeps every cell: llama.cpp logged 1.00 + 1.00 MiB.
    assert llama_kv_bytes(TINY_GEMMA3, load(n_ctx=4096, swa_full=True))[0] == 2 * MIB
    # the server's default: the window per sequence and a batch past it, padded to 256 (768 cells)
    assert llama_kv_bytes(TINY_GEMMA3, load(n_ctx=4096))[0] == MIB + 768 * 128 * 2


def test_recurrent_state_grows_with_the_servers_rollback_snapshots() -> None:
    """The write-ups' 27B target on llama-server's draft-dflash keeps n_max
    rollback snapshots of its delta-net state a sequence: n-max 7 holds
    twice n-max 3's."""
    per = QWEN35_27B.recurrent_elems * 4
    assert per == pytest.approx(157.9e6, rel=0.01)
    assert recurrent_bytes(QWEN35_27B, load(n_ctx=8192, rs_snapshots=3))[0] == 4 * per
    assert recurrent_bytes(QWEN35_27B, load(n_ctx=8192, rs_snapshots=7))[0] == 8 * per
    # llama.cpp logged "RS buffer size = 0.06 MiB" for the tiny hybrid, one sequence
    assert recurrent_bytes(QWEN35_TINY, load(n_ctx=4096))[0] == 14592 * 4
    # the target's KV skips its MTP block; the MTP context caches only that block
    assert llama_kv_bytes(QWEN35_TINY, load(n_ctx=4096))[0] == 2 * MIB
    assert llama_kv_bytes(QWEN35_TINY, load(n_ctx=4096, nextn_only=True))[0] == 2 * MIB


def test_a_verify_pass_reserves_logits_for_its_width_on_the_server() -> None:
    """llama-server reserves logits for n_parallel x (n_max + 1) rows
    (server_output_limits); the in-process context for a whole batch."""
    narrow = llama_compute_bytes(QWEN35_27B, load(n_ctx=8192, n_outputs=4))[0]
    wide = llama_compute_bytes(QWEN35_27B, load(n_ctx=8192, n_outputs=13))[0]
    batch = llama_compute_bytes(QWEN35_27B, load(n_ctx=8192, n_outputs=512))[0]
    assert narrow <= wide < batch
    assert batch >= 512 * 248320 * 4


def test_placement_on_a_gpu_keeps_the_embedding_on_the_host() -> None:
    parts = {p.name: p for p in llama_parts(load(n_ctx=4096), SMOLLM2, on_device=True)}
    # tied: the output layer reads the embedding on the device too
    assert parts["weights"].bytes == SMOLLM2.weight_bytes and parts["weights"].device
    assert parts["weights on the host"].bytes == SMOLLM2.embd_bytes and not parts["weights on the host"].device
    assert parts["KV cache"].device
    # half the layers offloaded: half the rest stays on the host
    half = {p.name: p for p in llama_parts(load(n_ctx=4096), SMOLLM2, on_device=True, offload=0.5)}
    assert half["weights"].bytes < parts["weights"].bytes
    assert half["weights"].bytes + half["weights on the host"].bytes == pytest.approx(
        SMOLLM2.weight_bytes + SMOLLM2.embd_bytes, rel=1e-6)


def test_a_cpu_repacks_only_the_types_it_repacks() -> None:
    q4_0 = dataclasses.replace(SMOLLM2, matrix_types=((2, 59_715_584), (8, 100)))
    names = {p.name: p.bytes for p in llama_parts(load(n_ctx=512, repack=True), q4_0, False,
                                                  repacked_types=frozenset({2}))}
    assert names["repacked weights"] == 59_715_584
    assert "repacked weights" not in {p.name for p in llama_parts(load(n_ctx=512, repack=False), q4_0, False,
                                                                   repacked_types=frozenset({2}))}
    on_gpu = {p.name for p in llama_parts(load(n_ctx=512, repack=True), q4_0, True, repacked_types=frozenset({2}))}
    assert "repacked weights" not in on_gpu


def test_an_arm_counts_against_its_places_budget() -> None:
    needs = MemoryNeeds(LLAMA_CPP, (load(n_ctx=4096),), accelerated=True, process_bytes=300 * MIB)
    on_cpu = estimate("a", needs, {"m": SMOLLM2}, "cpu")
    on_gpu = estimate("a", needs, {"m": SMOLLM2}, "cuda", runtime_bytes=512 * MIB)
    assert on_cpu.where == "cpu" and on_gpu.where == "cuda"
    # on a GPU the host's parts (process, embedding, logits buffer) do not count against the card
    assert on_gpu.total == sum(p.bytes for p in on_gpu.parts if p.device)
    assert on_gpu.part("cuda runtime") is not None and on_cpu.part("cuda runtime") is None
    assert on_gpu.host_bytes >= 300 * MIB
    # an arm that asks for no accelerator stays on the CPU wherever it runs
    plain = estimate("a", dataclasses.replace(needs, accelerated=False), {"m": SMOLLM2}, "cuda")
    assert plain.where == "cpu" and plain.total == sum(p.bytes for p in plain.parts)
    # on a CPU, a reserve is resident only as passes use it
    assert on_cpu.resident < on_cpu.total


def test_mlx_holds_the_tokens_it_has_seen() -> None:
    shape = dataclasses.replace(SMOLLM2, file_format="safetensors")
    needs = MemoryNeeds(MLX, (load(n_ctx=4096, n_ubatch=512, n_outputs=512),), accelerated=False)
    full = estimate("a", needs, {"m": shape}, "cpu")
    cell = estimate("a", at_lengths(needs, prompt_tokens=60, generated=40), {"m": shape}, "cpu")
    assert full.part("KV cache").bytes == 4096 * 11520 * 2  # type: ignore[union-attr]
    assert cell.part("KV cache").bytes == 256 * 11520 * 2  # type: ignore[union-attr]
    assert cell.total < full.total
    # a GGUF on MLX is read whole while it is converted
    assert estimate("a", needs, {"m": SMOLLM2}, "cpu").part("load copy") is not None
    assert full.part("load copy") is None
    # re-quantized at load: 4 bits and a scale and bias per group of 64
    mats = dataclasses.replace(shape, matrix_elems=1000 * 64, weight_bytes=1000 * 64 * 2)
    q4 = estimate("a", MemoryNeeds(MLX, (load(n_ctx=256, weight_bits=4),), False), {"m": mats}, "cpu")
    assert q4.part("weights").bytes == int(1000 * 64 * (0.5 + 4 / 64))  # type: ignore[union-attr]


def test_vllm_takes_its_share_whatever_the_model() -> None:
    needs = MemoryNeeds(VLLM, (load(n_ctx=4096),), accelerated=True, budget_share=0.5)
    got = estimate("v", needs, {"m": SMOLLM2}, "cuda", device_total=80 << 30)
    assert got.taken == 40 << 30 and got.total == 40 << 30
    assert any("whatever the model" in n for n in got.notes)


def test_sizes_read_as_people_read_them() -> None:
    assert size_text(None) == "—"
    assert size_text(92 * MIB) == "92 MiB"
    assert size_text(int(15.36e9)) == "14.3 GiB"
