"""Greedy picks by llama.cpp's backend sampler (lab_llamacpp.gpu_pick) give
the host arg-max's tokens, row for row of a verify pass, with EOG masked;
here on llama.cpp's CPU backend, which runs the same sampler graph."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lab_llamacpp import synthetic

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[llamacpp]')")
pytest.importorskip("gguf", reason="gguf is not installed (pip install -e '.[llamacpp]')")
pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gpu-pick") / "tiny.gguf"
    synthetic.write(synthetic.SHAPES["tiny"], path)
    return path


def open_context(path: Path, gpu_pick: bool) -> tuple[Any, Any]:
    from lab_llamacpp import engine
    from lab_llamacpp.gpu_pick import outputs_per_seq

    model = engine.Model(str(path))
    if gpu_pick:
        with outputs_per_seq(16):
            ctx = engine.Context(model, 256, 64, 2)
    else:
        ctx = engine.Context(model, 256, 64, 2)
    return model, ctx


def test_backend_picks_equal_host_argmax_on_every_verify_row(tiny_path: Path) -> None:
    from lab_llamacpp.backend import LlamaTarget
    from lab_llamacpp.gpu_pick import GpuPickTarget

    picks: dict[bool, list[list[int]]] = {}
    for gpu_pick in (False, True):
        model, ctx = open_context(tiny_path, gpu_pick)
        try:
            target = (GpuPickTarget if gpu_pick else LlamaTarget)(ctx, 0.0, ignore_eos=True)
            prompt = model.tokenize("The lighthouse keeper climbed the stairs")
            rows = []
            for width in (1, 3, 9):
                target.reset()
                target.decode(prompt, all_logits=False)
                target.decode(prompt[1 : 1 + width], all_logits=True)
                rows.append([target.pick(i) for i in range(width)])
            picks[gpu_pick] = rows
        finally:
            ctx.close()
            model.close()
    assert picks[True] == picks[False]
    assert [len(r) for r in picks[True]] == [1, 3, 9]


def test_masked_tokens_never_win_and_sampling_goes_back_to_the_host(tiny_path: Path) -> None:
    from lab_llamacpp.gpu_pick import GpuPickTarget, backend_greedy

    table = synthetic.next_token_table(synthetic.SHAPES["tiny"])
    model, ctx = open_context(tiny_path, False)
    try:
        prompt = model.tokenize("A keeper")
        winner = int(table[prompt[-1]])
        ctx.decode(prompt, "last")
        runner_up = int(ctx.argmax(-1, [winner]))
    finally:
        ctx.close()
        model.close()
    model, ctx = open_context(tiny_path, True)
    try:
        # Mask the token that would win: the pick is the host's runner-up.
        greedy = backend_greedy(ctx, [winner])
        ctx.decode(prompt, "last")
        assert greedy.pick(-1) == runner_up != winner
        # A sampling target detaches the backend chain so host logits exist again.
        ctx.reset()
        GpuPickTarget(ctx, 0.8, ignore_eos=False)
        ctx.decode(prompt, "last")
        assert int(ctx.logits(-1).argmax()) == winner
    finally:
        ctx.close()
        model.close()


def test_a_context_without_room_refuses_a_verify_batch(tiny_path: Path) -> None:
    from lab_llamacpp import engine
    from lab_llamacpp.gpu_pick import backend_greedy

    model = engine.Model(str(tiny_path))
    ctx = engine.Context(model, 256, 64, 2)  # llama.cpp's default: one backend row per sequence
    try:
        backend_greedy(ctx)
        prompt = model.tokenize("A keeper")
        ctx.decode(prompt, "last")
        with pytest.raises(engine.LlamaError):
            ctx.decode(prompt[1:4], "all")
    finally:
        ctx.close()
        model.close()
