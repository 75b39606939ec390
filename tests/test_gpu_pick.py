"""Greedy picks by llama.cpp's backend sampler (lab_llamacpp.gpu_pick) give
the host arg-max's tokens, row for row of a verify pass, with EOG masked;
here on llama.cpp's CPU backend, which runs the same sampler graph."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

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

    model = engine.Model(str(path))
    ctx = engine.Context(model, 256, 64, 2, outputs_per_seq=16 if gpu_pick else 0)
    return model, ctx


def test_backend_picks_equal_host_argmax_on_every_verify_row(tiny_path: Path) -> None:
    from lab_llamacpp.gpu_pick import GpuPickTarget
    from lab_llamacpp.target import LlamaTarget

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


def test_host_pick_masks_only_a_winner_and_keeps_the_first_maximum(tiny_path: Path) -> None:
    """The host arg-max applies its mask only when a masked token wins; that
    must pick what masking first would: the first maximum among the tokens
    left, ties included, and a fresh decode's logits, not a stale view's."""
    import llama_cpp as ll
    import numpy as np

    model, ctx = open_context(tiny_path, False)
    try:
        prompt = model.tokenize("A keeper")
        ctx.decode(prompt, "last")
        winner = ctx.argmax(-1)
        row = np.ctypeslib.as_array(ll.llama_get_logits_ith(ctx.ptr, -1), shape=(model.n_vocab,))
        assert winner == int(row.argmax())
        original = row.copy()
        low, high = 5, 9  # a tie at the top: the masked one comes first

        def tied() -> None:  # a masked pick writes -inf into the row: set it afresh
            row[:] = original
            row[[low, high]] = float(original.max()) + 1.0

        for masked, expected in (((), low), ({low}, high), ({high}, low), ({low, high}, winner)):
            tied()
            assert ctx.argmax(-1, frozenset(masked)) == expected, masked
        # The next decode's row, read through the same cached view, is the engine's.
        ctx.decode([winner], "last")
        fresh = np.ctypeslib.as_array(ll.llama_get_logits_ith(ctx.ptr, -1), shape=(model.n_vocab,)).copy()
        assert ctx.argmax(-1) == int(fresh.argmax())
    finally:
        ctx.close()
        model.close()


@contextmanager
def masking_target(path: Path, gpu_pick: bool, text: str,
                   masked_of: Callable[[list[int]], int]) -> Iterator[tuple[Any, Any, list[int], int]]:
    """A greedy target (device picks or host picks) on a fresh context whose
    model counts ``masked_of(prompt)`` as its one EOG token: (target,
    context, prompt, masked)."""
    from lab_llamacpp.gpu_pick import GpuPickTarget
    from lab_llamacpp.target import LlamaTarget

    model, ctx = open_context(path, gpu_pick)
    try:
        prompt = model.tokenize(text)
        masked = masked_of(prompt)
        model.eog_ids = [masked]
        yield (GpuPickTarget if gpu_pick else LlamaTarget)(ctx, 0.0, ignore_eos=True), ctx, prompt, masked
    finally:
        ctx.close()
        model.close()


def chain_after(table: Any, token: int, n: int) -> list[int]:
    out = []
    for _ in range(n):
        token = int(table[token])
        out.append(token)
    return out


def test_a_masked_winner_sends_the_pass_and_the_cells_picks_to_the_host(tiny_path: Path) -> None:
    """The loop's chain is the arg-max alone: when a masked token wins a
    baseline pick, the target redoes that decode with host logits, picks the
    host's runner-up, and picks on the host until the next reset; the output
    is the host-masked greedy output token for token."""
    from lab_llamacpp.gpu_pick import GpuPickTarget

    from lab.api import Cell, GenerationRequest
    from lab.kit.speculative import generate

    table = synthetic.next_token_table(synthetic.SHAPES["tiny"])
    outputs: dict[bool, list[int]] = {}
    for gpu_pick in (False, True):
        # the fourth output token would win
        with masking_target(tiny_path, gpu_pick, "A keeper", lambda p: chain_after(table, p[-1], 4)[3]) as (
                target, ctx, prompt, masked):
            req = GenerationRequest(cell=Cell("arm", "p", 1), prompt="", system=None, chat_template=False,
                                    max_tokens=12, temperature=0.0, seed=0, ignore_eos=True, n_max=None)
            gen = generate(target, prompt, req, lambda e: None, lambda: False)
            outputs[gpu_pick] = gen.ids
            assert gen.ids[:3] == chain_after(table, prompt[-1], 3)
            assert masked not in gen.ids
            if gpu_pick:
                assert isinstance(target, GpuPickTarget)
                assert target.host_redos == 1 and target.greedy is None
                assert ctx.n_past == len(prompt) + 11  # the redo left the cache as it was
                target.reset()  # a new cell picks on the device again
                assert target.greedy is not None
                target.decode(prompt, all_logits=False)
                assert target.pick(-1) == table[prompt[-1]] and target.host_redos == 1
    assert outputs[True] == outputs[False]


def test_a_masked_winner_inside_a_verify_pass_redoes_the_whole_pass(tiny_path: Path) -> None:
    from lab_llamacpp.gpu_pick import GpuPickTarget

    table = synthetic.next_token_table(synthetic.SHAPES["tiny"])
    text = "The lighthouse keeper climbed the stairs and wrote the weather"
    picks: dict[bool, list[int]] = {}
    for gpu_pick in (False, True):
        # rows are prompt[1:10]; row 5's winner is masked
        with masking_target(tiny_path, gpu_pick, text, lambda p: int(table[p[1:10][5]])) as (
                target, ctx, prompt, masked):
            assert masked >= 0
            rows = prompt[1:10]
            target.reset()
            target.decode(prompt, all_logits=False)
            target.decode(rows, all_logits=True)
            picks[gpu_pick] = [target.pick(i) for i in range(len(rows))]
            assert ctx.n_past == len(prompt) + len(rows)
            assert masked not in picks[gpu_pick]
            if gpu_pick:
                assert isinstance(target, GpuPickTarget) and target.host_redos == 1
    assert picks[True] == picks[False]


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


GPU_PICK_ARMS = """
[[arms]]
name = "base"
backend = "llamacpp"
model = "embedded:smollm2"
options = {{ gpu_pick = "off" }}

[[arms]]
name = "base-gpu"
backend = "llamacpp"
model = "embedded:smollm2"
options = {{ gpu_pick = "on" }}

[[arms]]
name = "{drafter}-host"
backend = "llamacpp"
model = "embedded:smollm2"
drafter = "{drafter}"
n_max = 4
baseline = "base"
options = {{ gpu_pick = "off" }}
drafter_options = {options}

[[arms]]
name = "{drafter}-gpu"
backend = "llamacpp"
model = "embedded:smollm2"
drafter = "{drafter}"
n_max = 4
baseline = "base"
options = {{ gpu_pick = "on" }}
drafter_options = {options}
"""


@pytest.mark.parametrize(
    ("drafter", "options"),
    [("oracle", "{ error_rate = 0.3, seed = 5 }"), ("draft-model", '{ model = "embedded:smollm2-q4_0" }')],
)
def test_gpu_pick_arm_option_gives_the_host_picks_tokens(tmp_path: Path, drafter: str, options: str) -> None:
    """A whole run through the backend: the arm option turns backend picks
    on (target and draft model), and every arm lands the tokens its host-pick
    twin lands, step for step."""
    import dataclasses

    from lab.base.profile import RunSettings
    from lab.profile.load import parse_profile
    from lab.registry import load_registry
    from lab.runner import Runner

    # the run's own verify-cost probe is no part of what is compared here
    no_probe = "probe = false\n" if "probe" in {f.name for f in dataclasses.fields(RunSettings)} else ""
    text = (
        "[run]\nmax_tokens = 40\nrounds = 1\nwarmup = 0\nn_ctx = 512\n" + no_probe + "\n"
        '[[prompts]]\nname = "p"\ntext = "Write a short paragraph about lighthouses."\n'
        + GPU_PICK_ARMS.format(drafter=drafter, options=options)
    )
    registry = load_registry()
    reports: dict[str, Any] = {}
    from lab.base.events import ArmReported

    def listen(event: Any) -> None:
        if isinstance(event, ArmReported):
            reports[event.arm] = event.report

    rows = {r["arm"]: r for r in Runner(parse_profile(text, str(tmp_path / "p.toml"), registry), registry,
                                        listeners=[listen]).run()}
    assert all(r["status"] == "ok" for r in rows.values()), {a: r["detail"] for a, r in rows.items()}
    assert rows["base"]["text"] == rows["base-gpu"]["text"]
    host, gpu = rows[f"{drafter}-host"], rows[f"{drafter}-gpu"]
    assert gpu["text"] == host["text"]
    assert (gpu["steps"], gpu["drafted"], gpu["accepted"]) == (host["steps"], host["drafted"], host["accepted"])
    assert gpu["accepted"] > 0
    assert [reports[a]["gpu_pick"] for a in ("base", "base-gpu", f"{drafter}-host", f"{drafter}-gpu")] == [
        False, True, False, True]


def test_auto_picks_on_the_gpu_only_when_offloaded_and_greedy() -> None:
    from lab_llamacpp.target import wants_gpu_pick

    assert wants_gpu_pick("on", 0, 0.8)
    assert not wants_gpu_pick("off", 999, 0.0)
    assert not wants_gpu_pick("auto", 0, 0.0)
    assert not wants_gpu_pick("auto", 999, 0.7)
    import llama_cpp

    # this CPU build offloads nothing, so auto stays on the host here
    assert wants_gpu_pick("auto", 999, 0.0) == bool(llama_cpp.llama_supports_gpu_offload())


@pytest.mark.parametrize(
    ("arm_options", "drafter_options", "expected"),
    [
        ({"n_gpu_layers": 999}, {}, (999, "auto")),  # the draft sits where its target does
        ({"n_gpu_layers": 999, "gpu_pick": "off"}, {}, (999, "off")),
        ({"n_gpu_layers": 999}, {"n_gpu_layers": 0}, (0, "auto")),  # its own setting wins
        ({}, {}, (0, "auto")),
    ],
)
def test_a_draft_model_takes_its_arms_gpu_layers_unless_it_names_its_own(
    arm_options: dict[str, Any], drafter_options: dict[str, Any], expected: tuple[int, str]
) -> None:
    from lab_llamacpp.backend import LlamaCppBackend

    from lab.api import BackendContext, DrafterContext
    from lab.base.profile import Arm, RunSettings

    arm = Arm(name="d", backend="llamacpp", model="m", drafter="draft-model", n_max=4, options=arm_options,
              drafter_options={}, baseline="b", is_baseline=False, stack="llamacpp", group="d")
    backend = LlamaCppBackend(arm, BackendContext(run=RunSettings(), run_dir="", log=lambda _t: None))
    dctx = DrafterContext(stack="llamacpp", target_model="m", vocab_size=10, n_ctx=64, threads=1, seed=0,
                          temperature=0.0, reference=lambda _p, _r: None, log=lambda _t: None)
    draft = backend.draft_model({"model": "x", **drafter_options}, dctx)
    assert (int(draft.opts["n_gpu_layers"]), draft.opts["gpu_pick"]) == expected


def test_a_cell_whose_pass_was_redone_says_so_in_its_engine_report(tiny_path: Path) -> None:
    from lab_llamacpp.backend import LlamaCppBackend

    from lab.api import BackendContext, Cell, GenerationRequest
    from lab.base.profile import Arm, RunSettings

    table = synthetic.next_token_table(synthetic.SHAPES["tiny"])
    arm = Arm(name="base", backend="llamacpp", model=str(tiny_path), drafter=None, n_max=None,
              options={"gpu_pick": "on"}, drafter_options={}, baseline=None, is_baseline=True, stack="llamacpp",
              group="base")
    backend = LlamaCppBackend(arm, BackendContext(run=RunSettings(threads=2, n_ctx=256), run_dir="",
                                                  log=lambda _t: None))
    backend.load(lambda _e: None)
    try:
        assert backend.gpu_pick and backend.model is not None

        def go() -> Any:
            req = GenerationRequest(cell=Cell("base", "p", 1), prompt="A keeper", system=None, chat_template=False,
                                    max_tokens=8, temperature=0.0, seed=0, ignore_eos=True, n_max=None)
            return backend.generate(req, lambda _e: None, lambda: False)

        plain = go()
        assert "host_redos" not in plain.engine_report
        backend.model.eog_ids = [plain.ids[3]]  # the fourth token would win, masked
        masked = go()
        assert masked.engine_report["host_redos"] == 1
        assert masked.ids[:3] == plain.ids[:3] and plain.ids[3] not in masked.ids
        assert plain.ids[:4] == chain_after(table, backend.model.tokenize("A keeper")[-1], 4)
    finally:
        backend.close()
