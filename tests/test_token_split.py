"""benchmarks/token_split.py splits a real lab baseline token into its parts:
every generation-phase decode is seen once, and no part is counted twice
(what a device figure from it rests on)."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[llamacpp]')")
pytestmark = pytest.mark.engine


def test_a_baseline_cell_splits_into_parts_that_add_up() -> None:
    from benchmarks.decode_overhead import lab_run
    from benchmarks.token_split import split_clocks

    with split_clocks() as clocks:
        rate, _, picks = lab_run("embedded:smollm2", 24, 2, False)
    assert clocks.baseline is not None and not picks["base"]
    seen, decodes = clocks.baseline_counts
    assert seen == decodes == 23
    parts = clocks.baseline
    assert parts["token"] == pytest.approx(1e6 / rate, rel=1e-6)
    assert all(parts[k] > 0 for k in ("launch", "pick")), parts
    # device and loop are what the clocks left: negative means a part was counted twice
    assert parts["device"] >= 0 and parts["loop"] >= 0, parts


def test_the_engine_is_as_it_was_after_the_block() -> None:
    from lab_llamacpp import engine, gpu_pick
    from lab_llamacpp.backend import LlamaCppBackend

    from benchmarks.token_split import split_clocks

    before = (engine.Context.decode, engine.Context.wait, engine.Context.argmax, gpu_pick.BackendGreedy.pick,
              LlamaCppBackend.generate)
    env = os.environ.get("LAB_ARM_PROCESS")
    with split_clocks():
        assert engine.Context.decode is not before[0]
        assert os.environ["LAB_ARM_PROCESS"] == "shared"  # the arm runs where the clocks are
    assert os.environ.get("LAB_ARM_PROCESS") == env
    assert (engine.Context.decode, engine.Context.wait, engine.Context.argmax, gpu_pick.BackendGreedy.pick,
            LlamaCppBackend.generate) == before
