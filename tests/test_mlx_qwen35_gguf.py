"""llama.cpp's qwen35 hybrid GGUF (synthetic:qwen35-tiny: gated delta-net
layers, one full-attention layer, an MTP block) on MLX through mlx-lm's
qwen3_5 model, against llama.cpp on the same file: the same prompt tokens,
the same greedy tokens (teacher-forced and free-running), logits within
the stacks' quantization noise (llama.cpp's CPU path rounds activations to
8 bits for Q4_0 products; a mapping error such as leaving the value heads
in ggml's tiled order moves them ten times as far)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core", reason="MLX is not installed (pip install -e '.[mlx]')")
pytest.importorskip("mlx_lm", reason="mlx-lm is not installed (pip install -e '.[mlx]')")

pytestmark = [pytest.mark.engine]

N_TOKENS = 32
PROMPT = "The lighthouse keeper"
# RMS of (MLX - llama.cpp) logits over the prompt and continuation: 0.05 when
# mapped right on this model, 0.56 with the value heads left tiled.
LOGIT_RMS_TOLERANCE = 0.15


@pytest.fixture(scope="module")
def gguf_path() -> Path:
    from lab_llamacpp import hybrid

    return hybrid.resolve("synthetic:qwen35-tiny")


@pytest.fixture(scope="module")
def loaded(gguf_path: Path) -> Any:
    from lab_mlx.loader import load_target

    return load_target(gguf_path)


def _llamacpp(path: Path, text: str) -> tuple[list[int], list[int], np.ndarray]:
    """Prompt ids, N_TOKENS greedy tokens and the logits of every position."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[llamacpp]')")
    from lab_llamacpp import engine

    model = engine.Model(str(path))
    ctx = engine.Context(model, 256, 256, 1)
    try:
        ids = model.tokenize(text)
        ctx.decode(ids, "all")
        rows = [ctx.logits(i) for i in range(len(ids))]
        out: list[int] = []
        for _ in range(N_TOKENS):
            out.append(int(np.argmax(rows[-1])))
            ctx.decode([out[-1]], "last")
            rows.append(ctx.logits(-1))
    finally:
        ctx.close()
        model.close()
    return ids, out, np.array(rows[:-1])


def test_greedy_tokens_and_logits_match_llamacpp(gguf_path: Path, loaded: Any) -> None:
    from lab_mlx.target import MlxTarget

    ids, want, ref = _llamacpp(gguf_path, PROMPT)
    assert loaded.vocab.encode(PROMPT, add_special=True) == ids
    logits = np.array(loaded.model(mx.array([ids + want[:-1]]))[0].astype(mx.float32))
    picks = logits[len(ids) - 1:].argmax(-1).tolist()
    first = next((i for i, (a, b) in enumerate(zip(picks, want)) if a != b), None)
    assert first is None, f"MLX's pick after {first} greedy tokens is {picks[first]}, llama.cpp's {want[first]}"
    rms = float(np.sqrt(np.mean((logits - ref) ** 2)))
    assert rms < LOGIT_RMS_TOLERANCE, f"logits differ by {rms:.3f} RMS (max {np.abs(logits - ref).max():.3f})"
    # MLX's own incremental decoding, recurrent state and KV cache included.
    target = MlxTarget(loaded.model, loaded.vocab, 256)
    target.set_sampling(0.0, 0, True)
    target.reset()
    target.decode(ids, all_logits=False)
    got = [target.pick(-1)]
    while len(got) < N_TOKENS:
        target.decode([got[-1]], all_logits=False)
        got.append(target.pick(-1))
    assert got == want


@pytest.mark.parametrize("text", [
    "Hello world, 42 times!\nNew line  two  spaces", " über café", "def lru_cache(maxsize): return maxsize",
])
def test_sentencepiece_tokens_match_llamacpp(gguf_path: Path, loaded: Any, text: str) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[llamacpp]')")
    from lab_llamacpp import engine

    model = engine.Model(str(gguf_path))
    try:
        want = model.tokenize(text)
    finally:
        model.close()
    assert loaded.vocab.encode(text, add_special=True) == want


def test_every_tensor_is_mapped_and_every_parameter_filled(gguf_path: Path, loaded: Any) -> None:
    from lab_mlx.gguf_qwen35 import map_weights, text_config
    from mlx.utils import tree_flatten

    raw, md = mx.load(str(gguf_path), return_metadata=True)
    cfg = text_config(md, 640)
    mapped = map_weights(raw, cfg)
    trunk = [k for k in raw if not k.startswith(f"blk.{cfg['num_hidden_layers']}.")]
    assert len(mapped) == len(trunk)
    params = {k for k, _ in tree_flatten(loaded.model.language_model.parameters())}
    assert set(mapped) == params
    with pytest.raises(ValueError, match="ssm_extra"):
        map_weights({**raw, "blk.0.ssm_extra.weight": raw["blk.0.ssm_a"]}, cfg)
    with pytest.raises(ValueError, match="attn_qkv"):
        map_weights({**raw, "blk.3.attn_qkv.weight": raw["blk.0.attn_qkv.weight"]}, cfg)


def test_value_heads_return_to_grouped_order() -> None:
    """The converter's reorder (grouped -> tiled), undone."""
    from lab_mlx.gguf_qwen35 import _grouped

    n_k, per_k, hd = 2, 3, 4
    grouped = np.arange(n_k * per_k * hd * 2).reshape(n_k * per_k * hd, 2)
    tiled = grouped.reshape(n_k, per_k, hd, 2).transpose(1, 0, 2, 3).reshape(-1, 2)
    np.testing.assert_array_equal(np.array(_grouped(mx.array(tiled), 0, n_k, per_k, hd)), grouped)


# -- mlx-mtp on the qwen35 GGUF: its nextn block as the qwen35 head ----------------------


def _dequantized(raw: Any, name: str) -> np.ndarray:
    base = name.rsplit(".", 1)[0]
    if base + ".scales" not in raw:
        return np.array(raw[name].astype(mx.float32))
    w, s, b = raw[name], raw[base + ".scales"], raw[base + ".biases"]
    bits = w.shape[-1] * 32 // (s.shape[-1] * 32)
    return np.array(mx.dequantize(w, s, b, group_size=32, bits=bits).astype(mx.float32))


def test_qwen35_head_step_matches_numpy(gguf_path: Path, loaded: Any) -> None:
    """One draft step of the head read from the GGUF's nextn block against
    the same block in numpy on the same (dequantized) weights: one position,
    so attention is each query head's value head, gated by the second half
    of its query projection (llama.cpp's qwen35 MTP graph)."""
    from lab_mlx.mtp_model import load_qwen35_head

    raw = mx.load(str(gguf_path))
    args = loaded.model.language_model.args
    layer, eps, d, hd = args.num_hidden_layers, args.rms_norm_eps, args.hidden_size, args.head_dim
    head = load_qwen35_head(args, raw, layer)
    w = {k[len(f"blk.{layer}."):]: _dequantized(raw, k) for k in raw
         if k.startswith(f"blk.{layer}.") and not k.endswith((".scales", ".biases"))}

    def rms(x: np.ndarray, g: np.ndarray) -> np.ndarray:
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g

    rng = np.random.default_rng(3)
    emb = _dequantized(raw, "token_embd.weight")[300]
    h = rng.standard_normal(d).astype(np.float32)
    x = w["nextn.eh_proj.weight"] @ np.concatenate([rms(emb, w["nextn.enorm.weight"]), rms(h, w["nextn.hnorm.weight"])])
    a = rms(x, w["attn_norm.weight"])
    q_and_gate = (w["attn_q.weight"] @ a).reshape(args.num_attention_heads, 2 * hd)
    v = (w["attn_v.weight"] @ a).reshape(args.num_key_value_heads, hd)
    per_kv = args.num_attention_heads // args.num_key_value_heads
    attended = np.concatenate([v[i // per_kv] for i in range(args.num_attention_heads)])
    x = x + w["attn_output.weight"] @ (attended / (1 + np.exp(-q_and_gate[:, hd:].reshape(-1))))
    m = rms(x, w["post_attention_norm.weight"])
    g = w["ffn_gate.weight"] @ m
    x = x + w["ffn_down.weight"] @ (g / (1 + np.exp(-g)) * (w["ffn_up.weight"] @ m))
    want = rms(x, w["nextn.shared_head_norm.weight"])
    _, normed = head(mx.array(emb)[None, None], mx.array(h)[None, None])
    np.testing.assert_allclose(np.array(normed)[0, 0], want, rtol=2e-3, atol=2e-3)


def test_the_head_from_the_targets_own_file_comes_from_the_targets_read(gguf_path: Path) -> None:
    """An MTP head in the target's own GGUF is taken from the tensors the
    target's load read, not from a second read of the whole file (which
    held a second copy of every tensor: 32.1 GiB of host memory at the
    peak for the 27B twin against the baseline's 17.2)."""
    from lab_mlx.loader import load_target
    from lab_mlx.mtp_model import load_qwen35_head

    raw = mx.load(str(gguf_path))
    loaded = load_target(gguf_path, keep_nextn=True)
    args = loaded.model.language_model.args
    layer = args.num_hidden_layers
    assert set(loaded.nextn) == {k for k in raw if k.startswith(f"blk.{layer}.")}
    assert load_target(gguf_path).nextn == {}
    emb = mx.random.normal((1, 1, args.hidden_size), key=mx.random.key(1))
    h = mx.random.normal((1, 1, args.hidden_size), key=mx.random.key(2))
    _, want = load_qwen35_head(args, raw, layer)(emb, h)
    _, got = load_qwen35_head(args, loaded.nextn, layer)(emb, h)
    np.testing.assert_array_equal(np.array(got), np.array(want))


def _run_mtp_profile() -> tuple[list[dict[str, Any]], list[Any]]:
    from lab.kit import models
    from lab.profile.load import parse_profile
    from lab.registry import load_registry
    from lab.runner import Runner

    registry = load_registry()
    if "mlx-mtp" not in registry.backends:
        import lab_mlx

        registry = load_registry([lab_mlx.plugin])
    if "synthetic:qwen35-tiny" not in models._BUILDERS:
        from lab_llamacpp import hybrid

        hybrid.register_models(models.register_model)
    arms = "".join(f"""
[[arms]]
name = "{name}"
backend = "{backend}"
model = "synthetic:qwen35-tiny"
{extra}
""" for name, backend, extra in [
        ("baseline", "mlx", ""),
        ("mtp", "mlx-mtp", 'n_max = 2\noptions = { mtp = "synthetic:qwen35-tiny" }'),
        ("mtp-set", "mlx-mtp", 'n_max = 2\nacceptance = [0.7]\noptions = { mtp = "synthetic:qwen35-tiny" }'),
    ])
    text = f"""
[run]
max_tokens = 120
temperature = 0.0
rounds = 1
warmup = 0
chat_template = false
ignore_eos = true
n_ctx = 512

[[prompts]]
name = "p"
text = "{PROMPT}"
{arms}"""
    events: list[Any] = []
    rows = Runner(parse_profile(text, "<test>", registry), registry, listeners=[events.append]).run()
    return rows, events


def test_mlx_mtp_on_the_qwen35_gguf_is_lossless_and_keeps_the_set_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    from lab.base.events import StepEvent

    reads: list[str] = []
    real_load = mx.load

    def counting(path: str, *args: Any, **kwargs: Any) -> Any:
        reads.append(str(path))
        return real_load(path, *args, **kwargs)

    monkeypatch.setattr(mx, "load", counting)
    monkeypatch.setenv("LAB_ARM_PROCESS", "shared")  # the count is kept in this process
    rows, events = _run_mtp_profile()
    # each arm read the GGUF once, the mtp arms' heads included
    assert len(reads) == 3 and len(set(reads)) == 1, reads
    by_arm = {r["arm"]: r for r in rows}
    for arm, row in by_arm.items():
        assert row["status"] == "ok", f"{arm}: {row.get('detail')}"
        assert row["n_tokens"] == 120
    assert by_arm["mtp"]["identical_to_baseline"] is True, f"diverges at char {by_arm['mtp']['first_divergence_char']}"
    steps = [e for e in events if isinstance(e, StepEvent) and e.cell.arm == "mtp-set" and e.drafted > 0]
    assert steps and by_arm["mtp-set"]["steps"] == len(steps)
    # the first drafted token of a step is kept with chance 0.7
    n, kept = len(steps), sum(1 for e in steps if e.accepted >= 1)
    assert n > 20
    assert abs(kept / n - 0.7) <= 3.5 * (0.7 * 0.3 / n) ** 0.5, f"{kept} of {n} steps kept their first draft"
