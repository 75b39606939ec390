"""Portable acceptance profiles and `lab predict`, on a real short run of the
embedded SmolLM2 (ngram and a draft model), priced with a recorded probe."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lab.analysis import acceptance_file as ap
from lab.analysis import predict
from lab.analysis.measured_acceptance import per_position
from lab.base import probe as probes
from lab.render.report import load_for_report, render
from tests.test_probe import engine_problem

PROFILE = """
[profile]
name = "portable"

[run]
max_tokens = 16
rounds = 1
warmup = 0
n_ctx = 512
threads = 1
probe = false

[[prompts]]
name = "code"
text = "Write a Python function that adds two numbers."

[[arms]]
name = "baseline"
backend = "llamacpp"
model = "embedded:smollm2"

[[arms]]
name = "ngram"
backend = "llamacpp"
model = "embedded:smollm2"
drafter = "ngram"
n_max = 3

[[arms]]
name = "self-draft"
backend = "llamacpp"
model = "embedded:smollm2"
drafter = "draft-model"
n_max = 3
drafter_options = { model = "embedded:smollm2" }
"""

# A recorded probe of "another machine": T(w) = 1, 1.1, 1.2, ... and a 2 ms one-row pass.
RECORDED = probes.Probe("llamacpp", "embedded:smollm2", "decode", tuple(range(1, 9)),
                        (tuple(0.002 * (1 + 0.1 * i) for i in range(8)),), machine={"cpu": "elsewhere", "cpu_count": 64},
                        notes={"n_gpu_layers": 999})


def lab(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lab.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    why = engine_problem()
    if why:
        pytest.skip(why)
    tmp = tmp_path_factory.mktemp("portable")
    (tmp / "portable.toml").write_text(PROFILE)
    out = lab("run", "portable.toml", "--out", "runs", "--quiet", cwd=tmp)
    assert out.returncode == 0, out.stderr
    return next((tmp / "runs").iterdir())


@pytest.mark.slow
def test_a_run_writes_its_acceptance_profile(run_dir: Path) -> None:
    saved = json.loads((run_dir / ap.ACCEPTANCE_FILE).read_text())
    assert saved["kind"] == ap.KIND and saved["version"] == ap.VERSION
    assert saved["source"]["run"] == run_dir.name and saved["source"]["profile"] == "portable"
    by_arm = {e["arm"]: e for e in saved["entries"]}
    assert set(by_arm) == {"ngram", "self-draft"}  # the baseline drafts nothing
    draft = by_arm["self-draft"]
    assert draft["target"] == "embedded:smollm2" and draft["drafter_model"] == "embedded:smollm2"
    assert draft["n_max"] == 3 and draft["temperature"] == 0.0 and len(draft["prompt_sha256"][0]) == 64
    assert by_arm["ngram"]["drafter_model"] is None
    # the counts are the run's steps, as the report's table counts them
    data = load_for_report(run_dir)
    steps = [s for s in data["steps"] if s["arm"] == "self-draft"]
    pa = per_position(steps)
    assert draft["reached"] == list(pa.reached) and draft["accepted"] == list(pa.accepted)
    assert draft["unconditional"][0] == pytest.approx(pa.accepted[0] / len([s for s in steps if s["drafted"]]))
    assert draft["costs"]["baseline_token_s"] > 0


@pytest.mark.slow
def test_predict_equals_the_one_formula_on_the_same_inputs(run_dir: Path) -> None:
    profile = ap.load(run_dir)  # a run directory reads as its acceptance.json
    for entry in profile.entries:
        got = ap.predict_on(entry, RECORDED)
        c = entry.costs
        assert c is not None
        # the arithmetic by hand: the source's costs in baseline tokens, on the probe's baseline token
        token_s = RECORDED.pass_seconds(1)
        inputs = predict.ArmInputs(token_s, c.draft_s_per_token / c.baseline_token_s * token_s, c.plain_share,
                                   entry.n_max, c.loop_s_per_step / c.baseline_token_s * token_s)
        want = predict.predict(entry.positions, RECORDED, inputs)
        assert [p.n_max for p in got.predictions] == list(range(1, 8))
        assert [p.speedup for p in got.predictions] == pytest.approx([p.speedup for p in want], rel=1e-12)
        assert got.best == predict.best(want)
        assert "not the probe's" in got.draft_from and not got.warnings
    # the same probe as the run's own prediction gives the run's own numbers:
    # priced on the run's machine the file predicts what the report does
    data = load_for_report(run_dir, probes.save(RECORDED, run_dir.parent / "recorded.json"))
    report = {(p["arm"], p["prompt"]): p for p in json.loads(render(data, "json"))["analysis"]["predictions"]}
    for entry in profile.entries:
        mine = ap.predict_on(entry, RECORDED)
        assert [p.speedup for p in mine.predictions] == pytest.approx(
            [c["speedup"] for c in report[(entry.arm, entry.name)]["curve"]], rel=1e-9)


def test_a_draft_probe_prices_a_model_drafter(run_dir: Path) -> None:
    entry = next(e for e in ap.load(run_dir).entries if e.arm == "self-draft")
    draft = probes.Probe("llamacpp", "embedded:smollm2", "decode", (1, 2), ((0.0005, 0.0006),))
    got = ap.predict_on(entry, RECORDED, draft, loop_s_per_step=50e-6)
    assert got.inputs.draft_s_per_token == 0.0005 and got.inputs.loop_s_per_step == 50e-6
    assert "draft probe" in got.draft_from and "given" in got.loop_from
    # 0.25 baseline tokens per drafted token, 0.025 per step for the loop; beside them the draft's
    # catch-up after a step that kept all: its two-row pass 0.2 of a row more, at the chance of keeping all
    first = got.predictions[0]
    catch_up = 0.2 * 0.0005 / RECORDED.pass_seconds(1) * entry.positions.kept_all(first.n_max)
    assert first.catch_up_cost == pytest.approx(catch_up) and catch_up > 0
    assert first.draft_cost == pytest.approx(0.25 * first.n_max + catch_up) and first.loop_cost == pytest.approx(0.025)
    other = probes.Probe("llamacpp", "synthetic:llama-8b", "decode", (1, 2, 3), ((0.003, 0.0033, 0.0036),))
    assert any("synthetic:llama-8b" in w and "embedded:smollm2" in w for w in ap.predict_on(entry, other).warnings)


@pytest.mark.slow
def test_lab_predict_says_where_each_input_came_from(run_dir: Path, tmp_path: Path) -> None:
    probe_file = probes.save(RECORDED, tmp_path / "gpu-probe.json")
    exported = lab("acceptance", str(run_dir), "-o", str(tmp_path / "acc.json"), cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    out = lab("predict", "acc.json", "--probe", str(probe_file), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert f"run {run_dir.name}" in text and "elsewhere, 64 cores" in text and "offloaded to the GPU" in text
    assert "self-draft / code" in text and "ngram / code" in text and "<- best" in text
    assert "break-even" in text and "draft cost: the acceptance file's run" in text
    other = probes.save(probes.Probe("llamacpp", "synthetic:llama-8b", "decode", (1, 2, 3), ((0.003, 0.0033, 0.0036),)),
                        tmp_path / "other.json")
    warned = lab("predict", "acc.json", "--probe", str(other), cwd=tmp_path)
    assert warned.returncode == 0 and "lab: warning: the probe measured synthetic:llama-8b" in warned.stderr


def test_report_shows_conditional_and_unconditional_per_position(run_dir: Path) -> None:
    data = load_for_report(run_dir)
    md = render(data, "md")
    assert "| self-draft | code | conditional: kept at i given i-1 kept |" in md
    assert "| self-draft | code | unconditional: kept at i of all drafting steps (llama.cpp, vLLM) |" in md
    positions = json.loads(render(data, "json"))["analysis"]["positions"]
    p = next(x for x in positions if x["arm"] == "ngram")
    assert p["conditional"] == p["rates"] and len(p["unconditional"]) == len(p["reached"])


@pytest.mark.parametrize("content, says", [
    (None, "no acceptance profile here"),
    ("{", "not valid JSON"),
    (json.dumps({"kind": "speclab.probe", "version": 1}), "a probe: pass it as --probe"),
    (json.dumps({"kind": ap.KIND, "version": 9, "entries": []}), "version 9"),
    (json.dumps({"kind": ap.KIND, "version": 1, "entries": [{"scope": "prompt", "arm": "a", "prompt": "p",
                                                             "backend": "b", "target": "t", "reached": [2],
                                                             "accepted": [3]}]}), "accepted more drafts"),
    (json.dumps({"kind": ap.KIND, "version": 1, "entries": [{"scope": "prompt", "arm": "a", "prompt": "p",
                                                             "backend": "b", "target": "t", "reached": [2, "x"],
                                                             "accepted": [1, 0]}]}), "reached must be a list of counts"),
])
@pytest.mark.slow
def test_bad_files_end_in_a_message(tmp_path: Path, content: str | None, says: str) -> None:
    path = tmp_path / "acc.json"
    if content is not None:
        path.write_text(content)
    probes.save(RECORDED, tmp_path / "probe.json")
    out = lab("predict", str(path), "--probe", "probe.json", cwd=tmp_path)
    assert out.returncode == 2 and says in out.stderr and "Traceback" not in out.stderr
    with pytest.raises(ap.AcceptanceFileError, match=says.split(":")[0]):
        ap.load(path)


@pytest.mark.slow
def test_a_missing_probe_and_a_run_without_steps_end_in_a_message(tmp_path: Path) -> None:
    out = lab("predict", "nothing.json", "--probe", "nope.json", cwd=tmp_path)
    assert out.returncode == 2 and "no acceptance profile here" in out.stderr and "Traceback" not in out.stderr
    (tmp_path / "acc.json").write_text(json.dumps({"kind": ap.KIND, "version": 1, "entries": []}))
    out = lab("predict", "acc.json", "--probe", "nope.json", cwd=tmp_path)
    assert out.returncode == 2 and "no probe file here" in out.stderr
    out = lab("acceptance", str(tmp_path), cwd=tmp_path)
    assert out.returncode == 2 and "no results.json here" in out.stderr and "Traceback" not in out.stderr
