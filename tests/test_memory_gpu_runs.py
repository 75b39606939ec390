"""The estimate against GPU runs the project keeps in results/: the
write-ups' twins (a Qwen3.x-27B hybrid and a 35B-A3B MoE hybrid on
llama-server, baseline, draft-dflash n-max 3 / 7 / 12 and draft-mtp 2 / 4,
H100 and H200) and an 8B with 1B drafts in process and on llama-server
(H100). Each row's measured peak is its processes' device memory (NVML).

The synthetic models are many GB and are not built here: their shapes are
recorded below as lab.kit.model_shape read them from the files' headers
(tests/test_model_shape.py holds the reader to the same writer's tiny
model). What is tested is everything after the headers: the backends'
needs, the llama.cpp arithmetic and the CUDA runtime part."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lab.analysis.memory_check import peak_checks
from lab.base.footprint import ModelShape
from lab.profile import fit
from lab.store import load_run

RESULTS = Path(__file__).resolve().parents[1] / "results"
SHAPES = {
    "synthetic:qwen35-27b": ModelShape(
        arch='qwen35', weight_bytes=15458177024, n_layers=64, n_embd=5120, n_vocab=248320, n_ff=17408, n_head=24, kv_elems=32768, recurrent_elems=39223296, nextn_layers=1, nextn_kv_elems=2048, nextn_weight_bytes=238983168, embd_bytes=715161600, dtype_bytes=2, file_format='gguf', weight_elems=27320697856,
        matrix_types=((0, 102236160), (2, 14637957120))),
    "synthetic:qwen35-27b-dflash": ModelShape(
        arch='dflash', weight_bytes=973460480, n_layers=5, n_embd=5120, n_vocab=248320, n_ff=17408, n_head=32, kv_elems=10240, dtype_bytes=2, block_size=16, target_layers=5, file_format='gguf', weight_elems=1730213120,
        matrix_types=((2, 973209600),)),
    "synthetic:qwen35-a3b": ModelShape(
        arch='qwen35moe', weight_bytes=20063425024, n_layers=40, n_embd=2048, n_vocab=248320, n_ff=4608, n_head=16, kv_elems=10240, recurrent_elems=16465920, nextn_layers=1, nextn_kv_elems=1024, nextn_weight_bytes=476956672, embd_bytes=286064640, dtype_bytes=2, file_format='gguf', weight_elems=35505251456,
        matrix_types=((0, 105644032), (2, 1098252288))),
    "synthetic:qwen35-a3b-dflash": ModelShape(
        arch='dflash', weight_bytes=171152384, n_layers=5, n_embd=2048, n_vocab=248320, n_ff=6144, n_head=32, kv_elems=5120, dtype_bytes=2, block_size=16, target_layers=5, file_format='gguf', weight_elems=304112896,
        matrix_types=((2, 171048960),)),
    "synthetic:llama-8b": ModelShape(
        arch='llama', weight_bytes=4517937152, n_layers=32, n_embd=4096, n_vocab=128256, n_ff=14336, n_head=32, kv_elems=65536, embd_bytes=295501824, dtype_bytes=2, file_format='gguf', weight_elems=8030261248,
        matrix_types=((2, 4221370368),)),
    "synthetic:llama-1b": ModelShape(
        arch='llama', weight_bytes=843128832, n_layers=16, n_embd=2048, n_vocab=128256, n_ff=8192, n_head=32, kv_elems=16384, embd_bytes=147750912, dtype_bytes=2, file_format='gguf', weight_elems=1498482688,
        matrix_types=((2, 695107584),)),
}
RUNS = ["twins-h100/dflash-run", "twins-h100/mtp-run", "twins-h200/dflash-run", "twins-h200/mtp-run",
        "twins-h100/a3b-run", "every-stack-h100/draft-run", "every-stack-h100/oracle-run"]


@pytest.fixture
def recorded_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    real = fit.model_shape

    def shape(ref: str, build: bool = False) -> ModelShape | str:
        return SHAPES[ref] if ref in SHAPES else real(ref, build)

    monkeypatch.setattr(fit, "model_shape", shape)


@pytest.mark.usefixtures("recorded_shapes")
@pytest.mark.parametrize("run", RUNS)
def test_gpu_rows_are_within_15_percent_of_their_estimate(run: str, registry: Any) -> None:
    checks = [c for c in peak_checks(load_run(RESULTS / run), registry) if c.expected is not None]
    table = "\n".join(f"{c.arm}: {c.where} expected {c.expected} measured {c.measured} ({c.ratio})" for c in checks)
    assert len(checks) >= 5, table
    assert all(c.where == "cuda" and c.within for c in checks), table


@pytest.mark.usefixtures("recorded_shapes")
def test_the_width_costs_what_the_rollback_snapshots_cost(registry: Any) -> None:
    """draft-dflash keeps n_max snapshots of the 27B's delta-net state: the
    measured step from n-max 3 to 7 to 12 is the estimate's."""
    by = {c.arm: c for c in peak_checks(load_run(RESULTS / "twins-h100/dflash-run"), registry)}
    for narrow, wide in (("dflash3-code", "dflash7-code"), ("dflash7-code", "dflash12-code")):
        measured = by[wide].measured - by[narrow].measured  # type: ignore[operator]
        expected = by[wide].expected - by[narrow].expected  # type: ignore[operator]
        assert measured == pytest.approx(expected, rel=0.05)
        assert expected > 500 << 20

