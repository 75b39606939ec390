"""Synthetic models: random Q4_0 weights at real shapes, written straight as
blocks. The same writer runs here at tiny shapes, loaded and decoded by real
llama.cpp: greedy picks follow the family's next-token table by a wide
margin, a verify batch and one-row decodes agree, and so the oracle and a
synthetic draft reach exactly the acceptance they are built for."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lab_llamacpp import synthetic

TINY = {"n_vocab": 640, "n_embd": 256, "n_layer": 2, "n_ff": 512, "n_head": 4, "n_head_kv": 2, "head_dim": 64}
TINY_DRAFT = {"n_vocab": 640, "n_embd": 128, "n_layer": 1, "n_ff": 256, "n_head": 2, "n_head_kv": 1, "head_dim": 64}


def tiny(name: str, **extra: Any) -> synthetic.Shape:
    dims = TINY_DRAFT if "1b" in name else TINY
    return synthetic.scaled(name, **{**dims, **extra})


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("gguf", reason="gguf is not installed (pip install -e '.[llamacpp]')")
    root = tmp_path_factory.mktemp("synthetic")
    out = {}
    for name in ("llama-8b", "llama-1b", "llama-1b-a70"):
        out[name] = root / f"{name}.gguf"
        synthetic.write(tiny(name, **({"n_layer": 16} if name == "llama-8b" else {})), out[name])
    return out


# -- without an engine -------------------------------------------------------------


def test_vocabulary_is_unique_and_typed() -> None:
    voc = synthetic.vocab(synthetic.LLAMA3_VOCAB)
    assert len(voc.tokens) == len(set(voc.tokens)) == synthetic.LLAMA3_VOCAB
    assert voc.tokens[:3] == ["<unk>", "<s>", "</s>"]
    assert voc.tokens[synthetic.N_CONTROL + 0x41] == "<0x41>"
    assert set(voc.types[synthetic.N_CONTROL:synthetic.FIRST_NORMAL].tolist()) == {synthetic.TOKEN_BYTE}
    assert set(voc.types[synthetic.FIRST_NORMAL:].tolist()) == {synthetic.TOKEN_NORMAL}


def test_next_token_table_permutes_normal_tokens() -> None:
    shape = synthetic.SHAPES["llama-8b"]
    table = synthetic.next_token_table(shape)
    normal = np.arange(synthetic.FIRST_NORMAL, shape.n_vocab)
    assert (table[: synthetic.FIRST_NORMAL] == -1).all()
    assert sorted(table[normal].tolist()) == normal.tolist()
    assert (table[normal] != normal).mean() > 0.99  # a permutation, not the identity


def test_draft_tables_agree_with_their_target_as_built() -> None:
    target = synthetic.next_token_table(synthetic.SHAPES["llama-8b"])
    full = synthetic.next_token_table(synthetic.SHAPES["llama-1b"])
    part = synthetic.next_token_table(synthetic.SHAPES["llama-1b-a70"])
    normal = slice(synthetic.FIRST_NORMAL, None)
    assert (full[normal] == target[normal]).all()
    assert (part[normal] == target[normal]).mean() == pytest.approx(0.7, abs=1e-4)
    assert sorted(part[normal].tolist()) == sorted(target[normal].tolist())  # still a permutation
    other = synthetic.next_token_table(synthetic.SHAPES["qwen3-a3b"])
    assert other.shape[0] == synthetic.QWEN3_VOCAB


def test_q4_0_bytes_match_the_real_models() -> None:
    # Q4_0 files of Llama-3.1-8B and Qwen3-30B-A3B hold about 4.7 and 17 GB.
    assert synthetic.SHAPES["llama-8b"].q4_0_bytes() == pytest.approx(4.5e9, rel=0.05)
    assert synthetic.SHAPES["qwen3-a3b"].q4_0_bytes() == pytest.approx(17.2e9, rel=0.05)
    assert synthetic.SHAPES["llama-1b"].q4_0_bytes() < synthetic.SHAPES["llama-8b"].q4_0_bytes() / 5


def test_register_names_every_shape() -> None:
    seen: dict[str, tuple[str, str]] = {}

    def register_model(ref: str, builder: Any, filename: str, version: str = "1") -> None:
        assert callable(builder)
        seen[ref] = (filename, version)

    synthetic.register_models(register_model)
    assert set(seen) == {f"synthetic:{n}" for n in synthetic.SHAPES}
    assert all(f.endswith(".gguf") for f, _ in seen.values())
    with pytest.raises(KeyError, match="known: synthetic:llama-8b"):
        synthetic.shape_for("synthetic:nope")


@pytest.mark.alone
def test_writer_cost_grows_like_writing_the_bytes(tmp_path: Path) -> None:
    """No F16 pass and no quantize pass: eight more layers (70 MB) cost about
    what writing 70 MB costs. The vocabulary and the pools are a fixed cost
    that the difference leaves out."""
    pytest.importorskip("gguf", reason="gguf is not installed (pip install -e '.[llamacpp]')")
    dims = {"n_vocab": 8000, "n_embd": 1024, "n_ff": 4096, "n_head": 8, "n_head_kv": 4, "head_dim": 128}
    small_s, small = synthetic.timed_write(synthetic.scaled("llama-8b", n_layer=2, **dims), tmp_path / "small.gguf")
    big_s, big = synthetic.timed_write(synthetic.scaled("llama-8b", n_layer=10, **dims), tmp_path / "big.gguf")
    extra = big - small
    assert extra >= 8 * 1024 * (1024 * 2 + 512 * 2 + 4096 * 3) // 32 * 18  # eight layers of Q4_0
    raw = np.random.default_rng(0).integers(0, 255, extra, dtype=np.uint8)
    t0 = time.perf_counter()
    raw.tofile(tmp_path / "raw.bin")
    raw_s = time.perf_counter() - t0
    assert big_s - small_s < 10 * raw_s + 0.5, (big_s, small_s, raw_s)


# -- on llama.cpp --------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine() -> Any:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[llamacpp]')")
    from lab_llamacpp import engine as eng

    return eng


def logits_after(engine: Any, path: Path, prompts: list[list[int]]) -> list[np.ndarray]:
    model = engine.Model(str(path))
    ctx = engine.Context(model, 256, 64, 2)
    try:
        out = []
        for ids in prompts:
            ctx.reset()
            ctx.decode(ids, "last")
            out.append(ctx.logits(-1))
        return out
    finally:
        ctx.close()
        model.close()


# As deep as the real models, as narrow as a test allows: a residual stream
# 32 and 48 layers deep is where a bias in the random weights adds up (a
# uniform nibble's -0.5 mean did, and the pick stopped following the table).
DEEP = {
    "llama-8b": {"n_layer": 32, "n_ff": 896},
    "qwen3-a3b": {"n_layer": 48, "n_expert": 16, "n_expert_used": 4, "n_ff_exp": 128},
}


@pytest.mark.engine
@pytest.mark.parametrize("name", ["llama-8b", "qwen3-a3b"])
def test_greedy_pick_follows_the_table_by_a_wide_margin(engine: Any, tmp_path: Path, name: str) -> None:
    pytest.importorskip("gguf", reason="gguf is not installed (pip install -e '.[llamacpp]')")
    shape = tiny(name, **DEEP[name])
    synthetic.write(shape, tmp_path / "deep.gguf")
    table = synthetic.next_token_table(shape)
    rng = np.random.default_rng(5)
    prompts = [[1, *rng.integers(synthetic.FIRST_NORMAL, shape.n_vocab, size=n).tolist()] for n in (1, 3, 7, 12, 20)]
    for ids, row in zip(prompts, logits_after(engine, tmp_path / "deep.gguf", prompts)):
        top2 = np.sort(row)[-2:]
        assert int(row.argmax()) == table[ids[-1]]
        # the winner stands several standard deviations of the field above the runner-up
        assert top2[1] - top2[0] > 3 * row.std(), (top2, row.std())


@pytest.mark.engine
def test_verify_batch_picks_what_one_row_decodes_pick(engine: Any, tiny_models: dict[str, Path]) -> None:
    table = synthetic.next_token_table(tiny("llama-8b"))
    model = engine.Model(str(tiny_models["llama-8b"]))
    ctx = engine.Context(model, 256, 64, 2)
    try:
        prompt = model.tokenize("The lighthouse keeper")
        ctx.decode(prompt, "last")
        one_by_one = [ctx.argmax(-1)]
        for _ in range(8):
            ctx.decode(one_by_one[-1:], "last")
            one_by_one.append(ctx.argmax(-1))
        ctx.reset()
        ctx.decode(prompt, "last")
        first = ctx.argmax(-1)
        ctx.decode([first, *one_by_one[1:8]], "all")
        batched = [first] + [ctx.argmax(i) for i in range(8)]
        assert batched == one_by_one
        chain = [int(table[prompt[-1]])]
        for _ in range(8):
            chain.append(int(table[chain[-1]]))
        assert one_by_one == chain
    finally:
        ctx.close()
        model.close()


def run_arms(tmp_path: Path, models: dict[str, Path]) -> dict[str, list[dict[str, Any]]]:
    from lab.profile.load import parse_profile
    from lab.registry import load_registry
    from lab.runner import Runner

    target = models["llama-8b"]
    text = f"""
[run]
allow_outside_paths = true  # models from the cache
max_tokens = 40
rounds = 1
warmup = 0
chat_template = false
ignore_eos = true
n_ctx = 512
threads = 2

[[prompts]]
name = "prose"
text = "Write a short paragraph about lighthouses."

[[prompts]]
name = "code"
text = "def reverse(linked_list):"

[[arms]]
name = "base"
backend = "llamacpp"
model = "{target}"

[[arms]]
name = "oracle"
backend = "llamacpp"
model = "{target}"
drafter = "oracle"
n_max = 4

[[arms]]
name = "draft"
backend = "llamacpp"
model = "{target}"
drafter = "draft-model"
n_max = 4
drafter_options = {{ model = "{models['llama-1b']}" }}

[[arms]]
name = "draft-a70"
backend = "llamacpp"
model = "{target}"
drafter = "draft-model"
n_max = 4
drafter_options = {{ model = "{models['llama-1b-a70']}" }}
"""
    registry = load_registry()
    rows = Runner(parse_profile(text, str(tmp_path / "p.toml"), registry), registry).run()
    by_arm: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_arm.setdefault(r["arm"], []).append(r)
    return by_arm


@pytest.mark.engine
def test_oracle_and_synthetic_draft_hit_their_built_acceptance(engine: Any, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    by_arm = run_arms(tmp_path, tiny_models)
    for arm in ("base", "oracle", "draft", "draft-a70"):
        assert [r["status"] for r in by_arm[arm]] == ["ok", "ok"], by_arm[arm]
    for arm in ("oracle", "draft", "draft-a70"):
        for r in by_arm[arm]:
            assert r["identical_to_baseline"] is True, r
    for arm in ("oracle", "draft"):
        for r in by_arm[arm]:
            assert r["acceptance_rate"] == 1.0, r
            assert r["mean_accepted_len"] == pytest.approx(5.0, abs=0.5)
    # 70 % agreement per token: a 4-token block survives whole far less often
    rates = [r["acceptance_rate"] for r in by_arm["draft-a70"]]
    assert all(0.2 < x < 0.95 for x in rates), rates


@pytest.mark.engine
def test_the_context_prompts_are_one_token_a_word(engine: Any, tmp_path: Path) -> None:
    """profiles/prompts/synthetic-*.txt, which the GPU context profiles price
    at a depth worked out from their length, are what their writer writes and
    tokenize to one synthetic piece a word."""
    import importlib.util

    import llama_cpp

    root = Path(__file__).resolve().parents[1] / "profiles" / "prompts"
    spec = importlib.util.spec_from_file_location("make_synthetic_words", root / "make_synthetic_words.py")
    assert spec is not None and spec.loader is not None
    writer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(writer)
    # the llama-8b vocabulary on a model too small to matter (a few MB)
    path = tmp_path / "vocab.gguf"
    synthetic.write(synthetic.scaled("llama-8b", n_embd=64, n_layer=1, n_ff=128, n_head=2, n_head_kv=1, head_dim=32),
                    path)
    model = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    for name, n in writer.LENGTHS.items():
        text = (root / f"{name}.txt").read_text(encoding="utf-8")
        assert text == writer.words(n, seed=n)
        assert len(model.tokenize(text.encode(), add_bos=True)) == n + 1
