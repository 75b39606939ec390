"""mlx-dflash on tiny models written in z-lab's checkpoint format: the real
loader reads DFlash and DFlash 2 drafts (4-bit too), greedy output equals
the MLX baseline on a plain and on a hybrid (recurrent) target, and, where
z-lab's reference package can be imported, our draft computes what the
reference computes and the whole loop lands the same tokens."""

from __future__ import annotations

from typing import Any

import pytest

mx = pytest.importorskip("mlx.core", reason="MLX is not installed (pip install -e '.[mlx]')")

from lab.api import GenerationRequest  # noqa: E402
from lab.base.events import Cell, StepEvent  # noqa: E402
from lab.kit import models  # noqa: E402
from lab.registry import load_registry  # noqa: E402

pytestmark = pytest.mark.engine

PROMPT = "def lru_cache(maxsize): return maxsize and lru_cache"


@pytest.fixture(scope="module", autouse=True)
def tiny_models() -> None:
    load_registry()


def _request(max_tokens: int, temperature: float = 0.0, ignore_eos: bool = True) -> GenerationRequest:
    return GenerationRequest(Cell("t", "p", 1), PROMPT, None, True, max_tokens, temperature, 0, ignore_eos, None)


def _baseline(target_ref: str, max_tokens: int) -> list[int]:
    from lab_mlx.loader import load_target
    from lab_mlx.target import MlxTarget

    from lab.kit.speculative import generate

    loaded = load_target(models.resolve(target_ref))
    target = MlxTarget(loaded.model, loaded.vocab, 512)
    target.set_sampling(0.0, 0, True)
    ids = loaded.vocab.prompt_ids(PROMPT, None, True)
    return generate(target, ids, _request(max_tokens), lambda e: None, lambda: False).ids


def _dflash(target_ref: str, draft_ref: str, max_tokens: int, block: int, bits: int | None = None,
            temperature: float = 0.0, ignore_eos: bool = True, split: bool = True) -> tuple[Any, list[StepEvent], Any]:
    from lab_mlx.dflash_loop import generate_dflash
    from lab_mlx.dflash_model import load_draft
    from lab_mlx.loader import load_target
    from lab_mlx.target import MlxTarget, install_capture

    loaded = load_target(models.resolve(target_ref))
    draft = load_draft(models.resolve(draft_ref), bits)
    draft.bind(loaded.model)
    target = MlxTarget(loaded.model, loaded.vocab, 512, install_capture(loaded.model, draft.spec.target_layer_ids))
    target.set_sampling(temperature, 0, ignore_eos)
    steps: list[StepEvent] = []
    ids = loaded.vocab.prompt_ids(PROMPT, None, True)
    gen = generate_dflash(
        target, draft, ids, _request(max_tokens, temperature, ignore_eos),
        lambda e: steps.append(e) if isinstance(e, StepEvent) else None, lambda: False, block, split_clock=split,
    )
    return gen, steps, target


@pytest.mark.parametrize("ref,version", [("tiny:qwen3-dflash", 1), ("tiny:qwen3-dflash2", 2)])
def test_draft_checkpoint_loads(ref: str, version: int) -> None:
    import mlx.nn as nn
    from lab_mlx.dflash_model import load_draft

    path = models.resolve(ref)
    assert (path / "config.json").exists() and list(path.glob("*.safetensors"))
    draft = load_draft(path)
    assert draft.spec.version == version
    assert draft.spec.target_layer_ids == (1, 3)
    assert hasattr(draft, "candidate_selector") == (version == 2)
    quantized = load_draft(path, bits=4)
    kinds = {type(m).__name__ for _, m in quantized.named_modules()}
    assert "QuantizedLinear" in kinds
    assert all(not isinstance(m, nn.QuantizedLinear) for _, m in draft.named_modules())


@pytest.mark.parametrize("draft_ref,block,bits", [
    ("tiny:qwen3-dflash", 4, None), ("tiny:qwen3-dflash2", 3, None), ("tiny:qwen3-dflash2", 5, 4),
])
def test_greedy_equals_baseline(draft_ref: str, block: int, bits: int | None) -> None:
    base = _baseline("tiny:qwen3", 40)
    gen, steps, target = _dflash("tiny:qwen3", draft_ref, 40, block, bits)
    assert gen.ids == base
    assert steps and all(s.drafted <= block - 1 for s in steps)
    assert max(s.drafted for s in steps) == block - 1
    # The draft has seen the hidden state of every token but the pending one.
    assert gen.engine_report["draft_context"] == target.n_past


@pytest.mark.parametrize("target_ref", ["tiny:qwen3", "tiny:qwen3.5-hybrid"])
def test_fused_timing_same_tokens_step_clock_only(target_ref: str) -> None:
    split, split_steps, _ = _dflash(target_ref, "tiny:qwen3-dflash2", 32, 4)
    fused, fused_steps, _ = _dflash(target_ref, "tiny:qwen3-dflash2", 32, 4, split=False)
    assert fused.ids == split.ids == _baseline(target_ref, 32)
    assert [(s.drafted, s.accepted) for s in fused_steps] == [(s.drafted, s.accepted) for s in split_steps]
    assert all(s.draft_s is None and s.verify_s is None and s.measured == "step" for s in fused_steps)
    assert all(s.measured == "draft,verify,step" for s in split_steps)


def test_hybrid_target_rolls_back_recurrent_state() -> None:
    base = _baseline("tiny:qwen3.5-hybrid", 32)
    gen, steps, target = _dflash("tiny:qwen3.5-hybrid", "tiny:qwen3-dflash", 32, 4)
    assert target.recurrent
    assert gen.ids == base
    rejected = sum(1 for s in steps if s.accepted < s.drafted)
    assert rejected > 0 and target.rollback_forwards == rejected


def test_temperature_sampling_is_seeded() -> None:
    a, steps_a, _ = _dflash("tiny:qwen3", "tiny:qwen3-dflash2", 24, 4, temperature=0.9)
    b, _, _ = _dflash("tiny:qwen3", "tiny:qwen3-dflash2", 24, 4, temperature=0.9)
    assert len(a.ids) == 24 and a.ids == b.ids
    assert sum(s.landed for s in steps_a) + a.engine_report["plain_tokens"] + 1 == 24


# --- against z-lab's reference implementation -------------------------------

def _reference_or_skip() -> None:
    from lab_mlx import reference

    why = reference.available()
    if why:
        pytest.skip(why)


@pytest.mark.parametrize("ref", ["tiny:qwen3-dflash", "tiny:qwen3-dflash2"])
def test_draft_forward_matches_reference(ref: str) -> None:
    _reference_or_skip()
    from lab_mlx import reference
    from lab_mlx.dflash_model import load_draft
    from lab_mlx.loader import load_target
    from lab_mlx.tiny import MASK_ID
    from mlx_lm.models.cache import make_prompt_cache

    loaded = load_target(models.resolve("tiny:qwen3"))
    ours = load_draft(models.resolve(ref))
    theirs = reference.load_reference_draft(models.resolve(ref))
    ours.bind(loaded.model)
    theirs.bind(loaded.model)
    hidden = mx.random.normal((1, 9, 128), key=mx.random.key(7))
    block = mx.array([[65] + [MASK_ID] * 4])
    ours_cache, their_cache = ours.make_cache(), make_prompt_cache(theirs)
    for step in range(2):  # second call: the cache holds context already
        h = ours.features(block, hidden, ours_cache)
        if ours.spec.version == 1:
            want = theirs(block, hidden, their_cache, logits_start=1)
            got = ours.logits(h)
            assert mx.allclose(got, want, atol=1e-4).item(), f"step {step}: max diff {mx.abs(got - want).max().item()}"
        else:
            want_tokens = theirs.propose(block, hidden, their_cache, 0.0, logits_start=1)[0]
            got_tokens = ours.candidate_selector(h, ours.logits(h), block[:, 0], 0.0, None)[0]
            assert got_tokens.tolist() == want_tokens.tolist()
        hidden = hidden[:, :3]


@pytest.mark.parametrize("ref", ["tiny:qwen3-dflash", "tiny:qwen3-dflash2"])
def test_loop_lands_the_same_tokens_as_reference(ref: str) -> None:
    _reference_or_skip()
    from lab_mlx import reference
    from lab_mlx.loader import load_target

    loaded = load_target(models.resolve("tiny:qwen3"))
    ids = loaded.vocab.prompt_ids(PROMPT, None, True)
    run = reference.run_reference(loaded.model, reference.load_reference_draft(models.resolve(ref)), loaded.vocab.hf, ids, 4, 32)
    gen, steps, _ = _dflash("tiny:qwen3", ref, 32, 4, ignore_eos=False)
    assert gen.ids == run.tokens
    # The reference also drafts at the very end of the budget where the lab
    # decodes one plain token; every other step lands the same count.
    assert [s.landed for s in steps] == run.landed_per_step[: len(steps)]
