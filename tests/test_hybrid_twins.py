"""Hybrid synthetic models (lab_llamacpp.hybrid): the write-ups' qwen35
target with its MTP block, the MoE hybrid, and their DFlash drafts. The big
shapes are checked by their layouts and sizes against the published
figures without writing gigabytes; the tiny ones are written, decoded by
real llama.cpp (greedy picks follow the family's table, and a verify batch
picks what one-row decodes pick) and run on real llama-server as the
write-ups' twins: draft-mtp and draft-dflash at a set acceptance, counts
the server's own, drafts rejected (the target rolls its recurrent state
back to the last kept position) and the acceptance within binomial noise."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lab_llamacpp import hybrid, synthetic

SHAPES = hybrid.SHAPES

# -- layouts and sizes, nothing written -------------------------------------------------


def _names(name: str) -> dict[str, tuple[int, ...]]:
    return {n: shape for n, shape, _ in hybrid.specs(SHAPES[name])}


def test_the_27b_interleaves_delta_net_and_attention_and_mounts_its_mtp_block() -> None:
    s = SHAPES["qwen35-27b"]
    assert isinstance(s, hybrid.HybridShape)
    t = _names("qwen35-27b")
    recurrent = [i for i in range(s.n_layer) if f"blk.{i}.ssm_a" in t]
    attention = [i for i in range(s.n_layer) if f"blk.{i}.attn_q.weight" in t]
    assert len(recurrent) == 48 and attention == list(range(3, 64, 4))
    # query and output gate projected together: 2 x 24 heads of 256
    assert t["blk.3.attn_q.weight"] == (2 * 24 * 256, 5120)
    assert t["blk.0.attn_qkv.weight"] == (2 * 16 * 128 + 48 * 128, 5120)
    assert t["blk.0.ssm_conv1d.weight"] == (2 * 16 * 128 + 48 * 128, 4)
    # the MTP block is layer 64: a full-attention layer behind eh_proj
    assert t["blk.64.nextn.eh_proj.weight"] == (5120, 2 * 5120)
    assert "blk.64.attn_q.weight" in t and "blk.64.ssm_a" not in t
    assert "blk.65.attn_norm.weight" not in t
    # every Q4_0 row is whole blocks
    for n, shape, fill in hybrid.specs(s):
        if hybrid._q4(fill):
            assert shape[-1] % synthetic.Q4_0_BLOCK == 0, n


def test_big_shapes_have_the_published_sizes() -> None:
    # Qwen3.x-27B: 27 B parameters; the write-ups' 4-bit file (UD-Q4_K_S,
    # about 4.5 bits a weight as Q4_0 is) holds 15.36 GB.
    dense = SHAPES["qwen35-27b"]
    assert hybrid.parameters(dense) == pytest.approx(27e9, rel=0.03)
    assert hybrid.q4_0_bytes(dense) == pytest.approx(15.36e9, rel=0.03)
    # Qwen3.5-35B-A3B: 35 B parameters, 3 B active a token
    moe = SHAPES["qwen35-a3b"]
    assert isinstance(moe, hybrid.HybridShape)
    assert hybrid.parameters(moe) == pytest.approx(35e9, rel=0.03)
    experts = 3 * moe.n_embd * moe.n_ff_exp * moe.n_expert * moe.n_layer_all
    active = hybrid.parameters(moe) - experts * (1 - moe.n_expert_used / moe.n_expert)
    # a token reads the embedding row, not the matrix: leave the input embeddings out
    active -= moe.n_vocab * moe.n_embd
    assert active == pytest.approx(3e9, rel=0.15)
    # z-lab's DFlash draft: "about 2 B" (BF16 3.86 GB: 1.93 B), Q4_K_M 1.14 GB.
    # Without the DFlash 2 selector's two vocabulary-wide tables this writer
    # leaves out, and at Q4_0 (4.5 bits a weight against Q4_K_M's ~5), within 15 %.
    draft = SHAPES["qwen35-27b-dflash"]
    assert hybrid.parameters(draft) == pytest.approx(1.93e9, rel=0.15)
    assert hybrid.q4_0_bytes(draft) == pytest.approx(1.14e9, rel=0.18)
    assert isinstance(draft, hybrid.DFlashShape)
    assert draft.target_layers == (1, 16, 31, 46, 61) and draft.n_embd == dense.n_embd
    assert draft.block_size - 1 >= 12  # n-max 12 fits in a block


def test_the_k_quant_twin_is_q4_k_where_rows_allow() -> None:
    big = SHAPES["qwen35-27b-q4k"]
    # every 27B tensor's rows are whole 256-weight blocks: all Q4_K, the same 4.5 bits a weight
    assert all(hybrid._k_rows(shape, big.quant) for _, shape, fill in hybrid.specs(big) if hybrid._q4(fill))
    assert hybrid.q4_0_bytes(big) == hybrid.q4_0_bytes(SHAPES["qwen35-27b"])
    assert hybrid.filename("qwen35-27b-q4k").endswith(".Q4_K.gguf")


def test_every_model_is_registered() -> None:
    seen: dict[str, str] = {}

    def register_model(ref: str, builder: Any, filename: str, version: str = "1") -> None:
        assert callable(builder)
        seen[ref] = filename

    hybrid.register_models(register_model)
    assert set(seen) == {f"synthetic:{n}" for n in SHAPES}
    assert not set(seen) & {f"synthetic:{n}" for n in synthetic.SHAPES}


# -- on llama.cpp --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("gguf", reason="gguf is not installed (pip install -e '.[llamacpp]')")
    root = tmp_path_factory.mktemp("hybrid")
    out = {}
    for name in ("qwen35-tiny", "qwen35-tiny-a3b", "qwen35-tiny-dflash", "qwen35-tiny-q4k"):
        out[name] = root / f"{name}.gguf"
        hybrid.write(SHAPES[name], out[name])
    return out


@pytest.mark.engine
@pytest.mark.parametrize("name", ["qwen35-tiny", "qwen35-tiny-a3b", "qwen35-tiny-q4k"])
def test_verify_batch_picks_what_one_row_decodes_pick(tiny: dict[str, Path], name: str) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[llamacpp]')")
    from lab_llamacpp import engine

    table = synthetic.family_table(SHAPES[name].n_vocab, SHAPES[name].family)
    model = engine.Model(str(tiny[name]))
    ctx = engine.Context(model, 256, 64, 1)
    try:
        prompt = model.tokenize("The lighthouse keeper")
        ctx.decode(prompt, "last")
        row = ctx.logits(-1)
        top2 = np.sort(row)[-2:]
        assert top2[1] - top2[0] > 3 * row.std(), (top2, row.std())  # far from a tie
        one_by_one = [ctx.argmax(-1)]
        for _ in range(12):
            ctx.decode(one_by_one[-1:], "last")
            one_by_one.append(ctx.argmax(-1))
        ctx.reset()
        ctx.decode(prompt, "last")
        first = ctx.argmax(-1)
        ctx.decode([first, *one_by_one[1:12]], "all")
        batched = [first] + [ctx.argmax(i) for i in range(12)]
        assert batched == one_by_one
        chain = [int(table[prompt[-1]])]
        for _ in range(12):
            chain.append(int(table[chain[-1]]))
        assert one_by_one == chain
    finally:
        ctx.close()
        model.close()


@pytest.mark.engine
def test_tiny_twins_on_llama_server_at_set_acceptance(tmp_path: Path) -> None:
    """profiles/twin-tiny.toml itself: the hybrid target with its MTP block
    under draft-mtp, and with its DFlash draft under draft-dflash."""
    from lab_llamacpp_server.binary import ServerNotFound, server_info

    from lab.analysis.set_acceptance_check import Z_LIMIT, checks
    from lab.profile.load import load_profile
    from lab.registry import load_registry
    from lab.render.report import ReportWriter
    from lab.runner import Runner
    from lab.store import RunStore

    try:
        server_info()
    except ServerNotFound as exc:
        pytest.skip(f"llama-server not found: {exc} (bash scripts/setup.sh all,test)")
    pytest.importorskip("gguf", reason="gguf is not installed (pip install -e '.[llamacpp]')")
    registry = load_registry()
    profile = load_profile(Path(__file__).parent.parent / "profiles" / "twin-tiny.toml", registry)
    store = RunStore(profile, tmp_path / "runs")
    rows = Runner(profile, registry, store, [ReportWriter()]).run()
    run_dir = store.path
    assert all(r["status"] == "ok" for r in rows), [(r["arm"], r["detail"][:300]) for r in rows]
    steps = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines() if line.strip()]
    found = {c.arm: c for c in checks(rows, steps)}
    report = (run_dir / "report.md").read_text()
    # the MTP entry sets acceptance per prompt: an arm (and a server) for each, running its prompt only
    cells = {(r["arm"], r["prompt"]) for r in rows if r["arm"].startswith("mtp")}
    assert cells == {("mtp-prose", "prose"), ("mtp-code", "code")}, cells
    for arm, n_max in (("mtp-prose", 2), ("mtp-code", 2), ("dflash", 3)):
        spec = [r for r in rows if r["arm"] == arm]
        assert len(spec) == (1 if arm.startswith("mtp") else 2) and all(r["steps"] for r in spec), arm
        for r in spec:
            assert r["engine_report"].get("counts_match_server") is True, (arm, r["engine_report"].get("checks"))
            assert r["identical_to_baseline"] is None and "acceptance set" in r["verdict"]
        mine = [s for s in steps if s["arm"] == arm]
        # drafts rejected, in part and whole: the target rolls its
        # recurrent state back to the last position it kept
        assert any(0 < s["accepted"] < s["drafted"] for s in mine), arm
        assert any(s["accepted"] == 0 for s in mine), arm
        assert any(s["accepted"] == s["drafted"] == n_max for s in mine), arm
        c = found[arm]
        seen = [(p.position, p.set_rate, p.accepted, p.reached, p.z) for p in c.positions]
        assert c.positions[0].reached > 40, seen
        # a random draft can propose nothing the server refuses here (no
        # end-of-generation token wins a greedy pick), so: within the noise
        assert c.honoured and c.worst_z is not None and c.worst_z <= Z_LIMIT, seen
        log = (run_dir / f"llama-server-{arm}.log").read_text(errors="replace")
        assert "synthetic acceptance" in log
        # the hybrid's per-position recurrent states, one per drafted token
        assert f"n_rs_seq              = {n_max}" in log, arm
    assert "within binomial noise" in report


@pytest.mark.engine
@pytest.mark.parametrize("name,depth", [("qwen35-tiny", 64), ("qwen35-tiny-a3b", 40), ("qwen35-tiny-q4k", 64)])
def test_greedy_pick_follows_the_table_at_the_real_depth(tmp_path: Path, name: str, depth: int) -> None:
    """As deep as the 27B (64 layers, 48 of them delta-net) and the A3B (40),
    as narrow as a test allows: the recurrent layers' updates must not swamp
    the last token's say in the next."""
    pytest.importorskip("gguf", reason="gguf is not installed (pip install -e '.[llamacpp]')")
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[llamacpp]')")
    from dataclasses import replace

    from lab_llamacpp import engine

    shape = replace(SHAPES[name], n_layer=depth)
    hybrid.write(shape, tmp_path / "deep.gguf")
    table = synthetic.family_table(shape.n_vocab, shape.family)
    model = engine.Model(str(tmp_path / "deep.gguf"))
    ctx = engine.Context(model, 256, 64, 1)
    try:
        rng = np.random.default_rng(5)
        for n in (1, 7, 20, 40):
            ids = [1, *rng.integers(synthetic.FIRST_NORMAL, shape.n_vocab, size=n).tolist()]
            ctx.reset()
            ctx.decode(ids, "last")
            row = ctx.logits(-1)
            top2 = np.sort(row)[-2:]
            assert int(row.argmax()) == table[ids[-1]]
            assert top2[1] - top2[0] > 5 * row.std(), (top2, row.std())  # measured: 11-14 standard deviations
    finally:
        ctx.close()
        model.close()


@pytest.mark.engine
def test_a_dflash_probe_stops_at_the_drafts_block_and_a_wider_arm_is_refused(tmp_path: Path) -> None:
    """The DFlash draft's trained block (16 positions) caps a step at 15
    drafts: the server probe measures the widths up to 16 and says why it
    stopped, where set rates for 25 positions would stop the server at
    start-up; an arm asking n_max 20 is a clear error row, not a clamp."""
    from lab_llamacpp_server.binary import ServerNotFound, server_info

    from lab.base.probe import needed_widths
    from lab.probing.driver import measure
    from lab.profile.load import parse_profile
    from lab.registry import load_registry
    from lab.runner import Runner
    from lab.store import RunStore

    try:
        server_info()
    except ServerNotFound as exc:
        pytest.skip(f"llama-server not found: {exc} (bash scripts/setup.sh all,test)")
    pytest.importorskip("gguf", reason="gguf is not installed (pip install -e '.[llamacpp]')")
    registry = load_registry()
    options = {"draft_model": "synthetic:qwen35-tiny-dflash", "flash_attn": "on"}
    widths = (1, 2, 17)
    assert max(needed_widths([12])) > 16  # what a profile at n-max 12 asks for
    p = measure("llamacpp-dflash", "synthetic:qwen35-tiny", widths, repeats=1, registry=registry,
                options=options, bandwidth=False)
    assert p.widths == (1, 2) and len(p.seconds[0]) == 2
    assert "trained block is 16 positions" in p.notes["widths_capped"]
    profile = parse_profile(f"""
[profile]
name = "wide"
[run]
max_tokens = 8
rounds = 1
warmup = 0
probe = false
chat_template = false
[[prompts]]
name = "p"
text = "Hello"
[[arms]]
name = "base"
backend = "llamacpp-server"
model = "synthetic:qwen35-tiny"
[[arms]]
name = "wide"
backend = "llamacpp-dflash"
model = "synthetic:qwen35-tiny"
n_max = 20
options = {{ draft_model = "{options['draft_model']}" }}
""", str(tmp_path / "p.toml"), registry)
    rows = {r["arm"]: r for r in Runner(profile, registry, RunStore(profile, tmp_path / "runs"), []).run()}
    assert rows["base"]["status"] == "ok"
    assert rows["wide"]["status"] == "error" and "set n_max <= 15" in rows["wide"]["detail"], rows["wide"]["detail"]
