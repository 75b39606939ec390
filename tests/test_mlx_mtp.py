"""The MLX MTP (nextn) head: its draft equals a numpy computation of the
same block on a tiny project-written head with GGUF tensor names."""

from __future__ import annotations

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core", reason="mlx is not installed")
pytest.importorskip("mlx_lm", reason="mlx-lm is not installed")

from lab_mlx.mtp_model import TENSORS, draft, load_head  # noqa: E402

D, HEADS, FF, VOCAB, EPS = 16, 2, 24, 40, 1e-6


def _args():
    from mlx_lm.models.llama import ModelArgs

    return ModelArgs(
        model_type="llama", hidden_size=D, num_hidden_layers=1, intermediate_size=FF, num_attention_heads=HEADS,
        rms_norm_eps=EPS, vocab_size=VOCAB, num_key_value_heads=HEADS,
    )


def _weights(rng):
    shapes = {
        "nextn.eh_proj.weight": (D, 2 * D), "nextn.enorm.weight": (D,), "nextn.hnorm.weight": (D,),
        "nextn.shared_head_norm.weight": (D,), "attn_norm.weight": (D,), "attn_q.weight": (D, D),
        "attn_k.weight": (D, D), "attn_v.weight": (D, D), "attn_output.weight": (D, D), "ffn_norm.weight": (D,),
        "ffn_gate.weight": (FF, D), "ffn_up.weight": (FF, D), "ffn_down.weight": (D, FF),
    }
    assert set(shapes) == set(TENSORS)
    out = {}
    for k, s in shapes.items():
        out[f"blk.3.{k}"] = (1.0 + 0.1 * rng.standard_normal(s)) if len(s) == 1 else 0.3 * rng.standard_normal(s)
    return out


def _rms(x, w):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS) * w


def _numpy_step(w, emb, h):
    g = lambda k: w[f"blk.3.{k}"]  # noqa: E731
    x = g("nextn.eh_proj.weight") @ np.concatenate([_rms(emb, g("nextn.enorm.weight")), _rms(h, g("nextn.hnorm.weight"))])
    # One position: attention over itself is its value projection (rope
    # does not touch v, softmax over one key is 1).
    a = _rms(x, g("attn_norm.weight"))
    x = x + g("attn_output.weight") @ (g("attn_v.weight") @ a)
    m = _rms(x, g("ffn_norm.weight"))
    gate = g("ffn_gate.weight") @ m
    x = x + g("ffn_down.weight") @ ((gate / (1 + np.exp(-gate))) * (g("ffn_up.weight") @ m))
    return x, _rms(x, g("nextn.shared_head_norm.weight"))


def test_mtp_first_draft_matches_numpy():
    rng = np.random.default_rng(7)
    w = _weights(rng)
    embed_w = rng.standard_normal((VOCAB, D))
    lm_w = rng.standard_normal((VOCAB, D))
    h = rng.standard_normal(D)
    head = load_head(_args(), {k: mx.array(v.astype(np.float32)) for k, v in w.items()}, 3)
    emb_mx = mx.array(embed_w.astype(np.float32))
    lm_mx = mx.array(lm_w.astype(np.float32))
    last = 5
    got = draft(head, lambda t: emb_mx[t], lambda x: x @ lm_mx.T, last, mx.array(h.astype(np.float32))[None, None], 1)
    _, normed = _numpy_step(w, embed_w[last], h)
    logits = lm_w @ normed
    top2 = np.sort(logits)[-2:]
    assert top2[1] - top2[0] > 1e-3, "the hand computation's pick must have a margin"
    assert got == [int(np.argmax(logits))]
    # The block's normed output itself, not only its argmax.
    out, normed_mx = head(emb_mx[mx.array([[last]])], mx.array(h.astype(np.float32))[None, None])
    np.testing.assert_allclose(np.array(normed_mx)[0, 0], normed, rtol=2e-4, atol=2e-4)


def test_missing_tensor_is_named():
    w = _weights(np.random.default_rng(1))
    del w["blk.3.nextn.hnorm.weight"]
    with pytest.raises(ValueError, match="blk.3.nextn.hnorm.weight"):
        load_head(_args(), {k: mx.array(v.astype(np.float32)) for k, v in w.items()}, 3)


def test_mtp_second_draft_feeds_block_output_back():
    rng = np.random.default_rng(11)
    w = _weights(rng)
    embed_w = rng.standard_normal((VOCAB, D))
    lm_w = rng.standard_normal((VOCAB, D))
    h = rng.standard_normal(D)
    head = load_head(_args(), {k: mx.array(v.astype(np.float32)) for k, v in w.items()}, 3)
    emb_mx = mx.array(embed_w.astype(np.float32))
    lm_mx = mx.array(lm_w.astype(np.float32))
    got = draft(head, lambda t: emb_mx[t], lambda x: x @ lm_mx.T, 2, mx.array(h.astype(np.float32))[None, None], 2)
    want, tok, state = [], 2, h
    for _ in range(2):
        state, normed = _numpy_step(w, embed_w[tok], state)
        tok = int(np.argmax(lm_w @ normed))
        want.append(tok)
    assert got == want


def _tiny_head_weights(args, layer: int, seed: int):
    """Random nextn tensors with GGUF names, shaped for target ``args``."""
    rng = np.random.default_rng(seed)
    d, ff = args.hidden_size, args.intermediate_size
    hd = getattr(args, "head_dim", None) or d // args.num_attention_heads
    q, kv = args.num_attention_heads * hd, args.num_key_value_heads * hd
    shapes = {
        "nextn.eh_proj.weight": (d, 2 * d), "nextn.enorm.weight": (d,), "nextn.hnorm.weight": (d,),
        "nextn.shared_head_norm.weight": (d,), "attn_norm.weight": (d,), "attn_q.weight": (q, d),
        "attn_k.weight": (kv, d), "attn_v.weight": (kv, d), "attn_output.weight": (d, q), "ffn_norm.weight": (d,),
        "ffn_gate.weight": (ff, d), "ffn_up.weight": (ff, d), "ffn_down.weight": (d, ff),
    }
    return {f"blk.{layer}.{k}": mx.array(((1.0 + 0 * rng.standard_normal(s)) if len(s) == 1
                                          else 0.05 * rng.standard_normal(s)).astype(np.float32))
            for k, s in shapes.items()}


PROMPT = "def lru_cache(maxsize): return maxsize and lru_cache"


def _mtp_run(max_tokens: int, acceptance=None):
    from lab_mlx.loader import load_target
    from lab_mlx.mtp_backend import generate_mtp
    from lab_mlx.target import MlxTarget, _layers, install_capture
    from mlx_lm.models.llama import ModelArgs

    from lab.api import GenerationRequest
    from lab.base.events import Cell, StepEvent
    from lab.kit import models
    from lab.kit.speculative import generate
    from lab.registry import load_registry

    load_registry()
    loaded = load_target(models.resolve("tiny:qwen3"))
    a = loaded.model.args
    args = ModelArgs(model_type="llama", hidden_size=a.hidden_size, num_hidden_layers=1,
                     intermediate_size=a.intermediate_size, num_attention_heads=a.num_attention_heads,
                     rms_norm_eps=a.rms_norm_eps, vocab_size=a.vocab_size, num_key_value_heads=a.num_key_value_heads,
                     head_dim=getattr(a, "head_dim", None))
    head = load_head(args, _tiny_head_weights(args, a.num_hidden_layers, 3), a.num_hidden_layers)
    req = GenerationRequest(Cell("t", "p", 1), PROMPT, None, True, max_tokens, 0.0, 0, True, 3, acceptance=acceptance)
    ids = loaded.vocab.prompt_ids(PROMPT, None, True)
    plain = MlxTarget(loaded.model, loaded.vocab, 512)
    plain.set_sampling(0.0, 0, True)
    base = generate(plain, ids, GenerationRequest(Cell("t", "p", 1), PROMPT, None, True, max_tokens, 0.0, 0, True, None),
                    lambda e: None, lambda: False).ids
    target = MlxTarget(loaded.model, loaded.vocab, 512, install_capture(loaded.model, [len(_layers(loaded.model)) - 1]))
    target.set_sampling(0.0, 0, True)
    steps: list = []
    embed = loaded.model.model.embed_tokens
    lm_head = getattr(loaded.model, "lm_head", None) or embed.as_linear
    gen = generate_mtp(target, head, embed, lm_head, ids, req,
                       lambda e: steps.append(e) if isinstance(e, StepEvent) else None, lambda: False, 3)
    return base, gen, steps


def test_mtp_loop_greedy_output_is_the_baseline():
    base, gen, steps = _mtp_run(40)
    assert gen.ids == base
    assert steps and all(s.drafted > 0 and s.draft_s is not None and s.verify_s is not None for s in steps)


def test_mtp_loop_set_acceptance_lands_drafts_at_the_rate():
    _, gen, steps = _mtp_run(200, (0.7, 0.49, 0.343))
    first = [s for s in steps if s.drafted > 0]
    kept = sum(1 for s in first if s.accepted >= 1)
    n = len(first)
    assert n > 20
    # the first drafted token of a step is kept with chance 0.7
    assert abs(kept / n - 0.7) <= 3.5 * (0.7 * 0.3 / n) ** 0.5
    assert sum(s.accepted for s in steps) > 0
