"""mlx-dflash with a DFlash draft in llama.cpp's GGUF (the file llama-server's
draft-dflash loads: synthetic:qwen35-tiny-dflash) on the qwen35 hybrid GGUF
target (synthetic:qwen35-tiny): every tensor mapped and every draft
parameter filled (Q4_0 and Q4_K), the target's features taken from layer
inputs as llama.cpp extracts them, one draft step equal to a numpy
reference written from llama.cpp's dflash graph, and a lab run at block 4
and 6 whose set acceptance holds within binomial noise."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core", reason="MLX is not installed (pip install -e '.[mlx]')")
pytest.importorskip("mlx_lm", reason="mlx-lm is not installed (pip install -e '.[mlx]')")

pytestmark = [pytest.mark.engine]

TARGET = "synthetic:qwen35-tiny"
DRAFT = "synthetic:qwen35-tiny-dflash"
PROMPT = "The lighthouse keeper"


def _resolve(ref: str) -> Path:
    from lab_llamacpp import hybrid

    return hybrid.resolve(ref)


@pytest.fixture(scope="module")
def draft_path() -> Path:
    return _resolve(DRAFT)


@pytest.fixture(scope="module")
def target_path() -> Path:
    return _resolve(TARGET)


def _dequantized(raw: Any, name: str) -> np.ndarray:
    base = name.rsplit(".", 1)[0]
    if base + ".scales" not in raw:
        return np.array(raw[name].astype(mx.float32))
    w, s, b = raw[name], raw[base + ".scales"], raw[base + ".biases"]
    bits = w.shape[-1] * 32 // (s.shape[-1] * 32)
    return np.array(mx.dequantize(w, s, b, group_size=32, bits=bits).astype(mx.float32))


# -- the file -----------------------------------------------------------------------------


@pytest.mark.parametrize("quant", ["q4_0", "q4_k"])
def test_every_tensor_is_mapped_and_every_parameter_filled(draft_path: Path, tmp_path: Path, quant: str) -> None:
    from lab_llamacpp import hybrid
    from lab_mlx.gguf_dflash import build_draft, map_weights
    from mlx.utils import tree_flatten

    shape = hybrid.SHAPES["qwen35-tiny-dflash"]
    assert isinstance(shape, hybrid.DFlashShape)
    path = draft_path
    if quant == "q4_k":
        pytest.importorskip("gguf", reason="gguf is not installed (pip install -e '.[llamacpp]')")
        path = tmp_path / "draft-q4k.gguf"
        hybrid.write(replace(shape, quant="q4_k"), path)
    raw, md = mx.load(str(path), return_metadata=True)
    written = {name for name, _, _ in hybrid.dflash_specs(shape)}
    assert {k for k in raw if k.endswith(".weight")} == written
    mapped = map_weights(raw)
    assert len(mapped) == len(raw)
    draft = build_draft(raw, md)
    params = dict(tree_flatten(draft.parameters()))
    assert set(mapped) == set(params)
    for name, value in mapped.items():
        assert params[name] is value or np.array_equal(np.array(params[name]), np.array(value)), name
    if quant == "q4_0":
        assert "fc.scales" in params and "layers.0.mlp.down_proj.scales" in params
    else:  # mx.load gives K-quants dequantized
        assert params["fc.weight"].dtype == mx.float16 and "fc.scales" not in params
    s = draft.spec
    assert (s.hidden_size, s.num_hidden_layers, s.num_attention_heads, s.num_key_value_heads, s.head_dim) == (
        shape.n_embd, shape.n_layer, shape.n_head, shape.n_head_kv, shape.head_dim)
    assert s.target_layer_ids == shape.target_layers and s.target_layer_inputs
    assert (s.block_size, s.mask_token_id, s.causal, s.rope_dims, s.rope_theta) == (16, 0, False, 64, shape.rope_base)
    # What llama.cpp refuses or computes differently is refused, by name.
    with pytest.raises(ValueError, match="attn_post_norm"):
        map_weights({**raw, "blk.0.attn_post_norm.weight": raw["blk.0.attn_norm.weight"]})
    with pytest.raises(ValueError, match="DFlash 2"):
        map_weights({**raw, "selector_hidden.weight": raw["blk.0.attn_norm.weight"]})
    with pytest.raises(ValueError, match="q_norm"):
        build_draft({k: v for k, v in raw.items() if k != "blk.0.attn_q_norm.weight"}, md)


def test_features_are_target_layer_inputs_as_llamacpp_extracts_them(target_path: Path) -> None:
    """dflash.target_layers counts layer inputs of the trunk (the nextn
    block is not a layer): id i is the output of layer i - 1, id n_layer the
    last layer's output before the final norm."""
    from lab_mlx.loader import load_target
    from lab_mlx.target import MlxTarget, install_capture

    loaded = load_target(target_path)
    inner = loaded.model.language_model.model
    n_layer = len(inner.layers)
    assert n_layer == 4  # trunk only: blk.4 is the MTP block
    ids = loaded.vocab.encode(PROMPT, add_special=True)
    # the residual stream by hand, before any layer is wrapped
    stream = [inner.embed_tokens(mx.array([ids]))]
    for layer in inner.layers:
        stream.append(layer(stream[-1], mask=None if layer.is_linear else "causal", cache=None))
    with pytest.raises(ValueError, match="does not exist"):
        install_capture(loaded.model, (1, n_layer + 1), inputs=True)
    taps = (1, 2, 0, n_layer)
    target = MlxTarget(loaded.model, loaded.vocab, 256, install_capture(loaded.model, taps, inputs=True))
    target.set_sampling(0.0, 0, True)
    target.decode(ids, all_logits=False)
    got = np.array(target.hidden)
    want = np.concatenate([np.array(stream[i]) for i in taps], axis=-1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


# -- one draft step against llama.cpp's graph, in numpy ------------------------------------


def _reference_logits(raw: Any, target_raw: Any, md: dict[str, Any], feats: np.ndarray, block: list[int]) -> np.ndarray:
    """llama.cpp's dflash graph (src/models/dflash.cpp) on dequantized
    weights: context rows fused by fc and enc.output_norm, their K/V at the
    context positions; the block attends, non-causally, over context and
    block; the target's embeddings and output matrix."""
    w = {k: _dequantized(raw, k) for k in raw if k.endswith(".weight")}
    eps = float(md["dflash.attention.layer_norm_rms_epsilon"].item())
    n_head = int(md["dflash.attention.head_count"].item())
    n_kv = int(md["dflash.attention.head_count_kv"].item())
    hd = int(md["dflash.attention.key_length"].item())
    n_rot = int(md["dflash.rope.dimension_count"].item())
    base = float(md["dflash.rope.freq_base"].item())

    def rms(x: np.ndarray, g: np.ndarray) -> np.ndarray:
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g

    def neox(x: np.ndarray, pos: np.ndarray) -> np.ndarray:  # (n, heads, hd)
        half = n_rot // 2
        ang = pos[:, None] * base ** (-np.arange(half) * 2.0 / n_rot)[None]
        cos, sin = np.cos(ang)[:, None], np.sin(ang)[:, None]
        x1, x2 = x[..., :half], x[..., half:n_rot]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin, x[..., n_rot:]], axis=-1)

    n_ctx = feats.shape[0]
    g = rms(feats @ w["fc.weight"].T, w["enc.output_norm.weight"])
    x = _dequantized(target_raw, "token_embd.weight")[block]
    ctx_pos = np.arange(n_ctx, dtype=np.float64)
    blk_pos = np.arange(n_ctx, n_ctx + len(block), dtype=np.float64)
    for il in range(int(md["dflash.block_count"].item())):
        p = f"blk.{il}."
        k_ctx = neox(rms((g @ w[p + "attn_k.weight"].T).reshape(n_ctx, n_kv, hd), w[p + "attn_k_norm.weight"]), ctx_pos)
        v_ctx = (g @ w[p + "attn_v.weight"].T).reshape(n_ctx, n_kv, hd)
        a = rms(x, w[p + "attn_norm.weight"])
        q = neox(rms((a @ w[p + "attn_q.weight"].T).reshape(len(block), n_head, hd), w[p + "attn_q_norm.weight"]), blk_pos)
        k = neox(rms((a @ w[p + "attn_k.weight"].T).reshape(len(block), n_kv, hd), w[p + "attn_k_norm.weight"]), blk_pos)
        v = (a @ w[p + "attn_v.weight"].T).reshape(len(block), n_kv, hd)
        keys, values = np.concatenate([k_ctx, k]), np.concatenate([v_ctx, v])
        heads = []
        for h in range(n_head):
            kv = h // (n_head // n_kv)  # consecutive query heads share a KV head
            score = q[:, h] @ keys[:, kv].T / np.sqrt(hd)
            score = np.exp(score - score.max(-1, keepdims=True))
            heads.append((score / score.sum(-1, keepdims=True)) @ values[:, kv])
        x = x + np.concatenate(heads, axis=-1) @ w[p + "attn_output.weight"].T
        m = rms(x, w[p + "ffn_norm.weight"])
        gate = m @ w[p + "ffn_gate.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * (m @ w[p + "ffn_up.weight"].T)) @ w[p + "ffn_down.weight"].T
    out = rms(x, w["output_norm.weight"])
    return out @ _dequantized(target_raw, "output.weight").T


def test_draft_step_matches_llamacpp_graph_in_numpy(draft_path: Path, target_path: Path) -> None:
    """Two steps on one draft cache: the second's context rows follow the
    first's, so their positions (and the block's) move on. The file's norms
    are all ones and its output projections write small updates (the
    synthetic residual's 0.05 RMS); here each norm gets weights of its own
    and both projections are scaled up, so a norm in the wrong place or a
    sublayer computed differently moves the logits well past tolerance."""
    from lab_mlx.gguf_dflash import build_draft
    from lab_mlx.loader import load_target

    loaded = load_target(target_path)
    raw, md = mx.load(str(draft_path), return_metadata=True)
    rng = np.random.default_rng(7)
    for name in list(raw):
        if name.endswith("norm.weight"):
            raw[name] = mx.array(rng.uniform(0.5, 1.5, raw[name].shape).astype(np.float32))
        elif name.split(".")[-2] in ("attn_output", "ffn_down") and name.endswith((".scales", ".biases")):
            raw[name] = raw[name] * 20  # Q4_0: weight = scale * q + bias
    draft = build_draft(raw, md)
    draft.bind(loaded.model)
    target_raw = mx.load(str(target_path))
    s = draft.spec
    feats = rng.standard_normal((8, len(s.target_layer_ids) * s.hidden_size)).astype(np.float32)
    cache = draft.make_cache()
    for start, stop, last in ((0, 5, 300), (5, 8, 41)):
        block = [last] + [s.mask_token_id] * 3
        hidden = draft.features(mx.array([block]), mx.array(feats[None, start:stop]), cache)
        got = np.array(draft.logits(hidden).astype(mx.float32))[0]
        want = _reference_logits(raw, target_raw, md, feats[:stop], block)[1:]
        scale = float(np.abs(want).max())
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-3 * scale)
        assert got.argmax(-1).tolist() == want.argmax(-1).tolist()


# -- the backend in a lab run --------------------------------------------------------------


def _registry() -> Any:
    from lab.kit import models
    from lab.registry import load_registry

    registry = load_registry()
    if "mlx-dflash" not in registry.backends:
        import lab_mlx

        registry = load_registry([lab_mlx.plugin])
    if TARGET not in models._BUILDERS:
        from lab_llamacpp import hybrid

        hybrid.register_models(models.register_model)
    return registry


def test_lab_run_at_block_4_and_6_keeps_the_set_rate(tmp_path: Path) -> None:
    from lab.analysis.set_acceptance_check import Z_LIMIT, checks
    from lab.profile.load import parse_profile
    from lab.runner import Runner
    from lab.store import RunStore

    registry = _registry()
    arms = "".join(f"""
[[arms]]
name = "{name}"
backend = "{backend}"
model = "{TARGET}"
{extra}
""" for name, backend, extra in [
        ("baseline", "mlx", ""),
        ("b4", "mlx-dflash", f'n_max = 3\nacceptance = 0.8\noptions = {{ draft = "{DRAFT}" }}'),
        ("b6", "mlx-dflash", f'n_max = 5\nacceptance = 0.8\noptions = {{ draft = "{DRAFT}" }}'),
        ("greedy", "mlx-dflash", f'n_max = 3\noptions = {{ draft = "{DRAFT}" }}'),
    ])
    text = f"""
[run]
max_tokens = 160
temperature = 0.0
rounds = 1
warmup = 0
probe = false
chat_template = false
ignore_eos = true
n_ctx = 512

[[prompts]]
name = "p"
text = "{PROMPT}"
{arms}"""
    profile = parse_profile(text, "<test>", registry)
    store = RunStore(profile, tmp_path / "runs")
    rows = Runner(profile, registry, store).run()
    by_arm = {r["arm"]: r for r in rows}
    for arm, row in by_arm.items():
        assert row["status"] == "ok", f"{arm}: {row.get('detail')}"
        assert row["n_tokens"] == 160
    assert by_arm["greedy"]["identical_to_baseline"] is True, f"diverges at char {by_arm['greedy']['first_divergence_char']}"
    steps = [json.loads(line) for line in (store.path / "steps.jsonl").read_text().splitlines() if line.strip()]
    for arm, n_max in (("b4", 3), ("b6", 5)):
        mine = [st for st in steps if st["arm"] == arm]
        assert by_arm[arm]["engine_report"]["block_size"] == n_max + 1
        assert by_arm[arm]["engine_report"]["draft_format"] == "gguf"
        assert sum(st["drafted"] for st in mine) > 0 and sum(st["accepted"] for st in mine) > 0, arm
        assert max(st["drafted"] for st in mine) == n_max, arm
    found = {c.arm: c for c in checks(rows, steps)}
    assert set(found) == {"b4", "b6"}
    for arm, c in found.items():
        seen = [(p.position, p.set_rate, p.accepted, p.reached, p.z) for p in c.positions]
        assert c.positions[0].reached > 25, seen
        assert c.honoured and c.worst_z is not None and c.worst_z <= Z_LIMIT, (arm, seen)
