"""Reports, exports and compare on run directories the runner saved (a
scripted backend on a virtual clock, so every figure is known), and the
prediction checked against what that backend measures."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from lab.analysis.compare import compare
from lab.analysis.run import summarize
from lab.base import economics as breakeven
from lab.base import probe as probes
from lab.cli import main
from lab.profile.load import parse_profile
from lab.render.compare import render_compare
from lab.render.report import load_for_report, render
from lab.runner import Runner
from lab.store import RunStore
from tests.fakes import fake_registry, profile_toml

# Virtual clock: a target token 10 ms, verification 12 ms at any width,
# drafting 2 ms per drafted token (tests/fakes.py).
ARMS = """
[[arms]]
name = "base"
backend = "fake"
options = { virtual_clock = true }

[[arms]]
name = "good"
backend = "fake"
n_max = 4
options = { speculative = true, accepted = [4, 2, 0], virtual_clock = true }

[[arms]]
name = "poor"
backend = "fake"
n_max = 3
options = { speculative = true, accepted = [0], virtual_clock = true }

[[arms]]
name = "dead"
backend = "fake"
n_max = 3
options = { speculative = true, accepted = [3], virtual_clock = true, virtual_draft_s = 0.03 }

[[arms]]
name = "drift"
backend = "fake"
n_max = 4
options = { speculative = true, accepted = [4], virtual_clock = true, text = "the lighthouse keeper watched the long grey sea" }

[[arms]]
name = "broke"
backend = "fake"
n_max = 4
options = { speculative = true, mode = "oom" }
"""


def _run(tmp_path: Path, arms: str = ARMS, name: str = "fake") -> Path:
    registry = fake_registry()
    text = profile_toml(arms, name=name, max_tokens=60, rounds=2, prompts=("prose", "code"))
    profile = parse_profile(text, f"{name}.toml", registry)
    store = RunStore(profile, tmp_path)
    Runner(profile, registry, store).run()
    return store.path


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _run(tmp_path_factory.mktemp("runs"))


def _by(summaries: list[dict[str, Any]], arm: str, prompt: str = "prose") -> dict[str, Any]:
    return next(s for s in summaries if s["arm"] == arm and s["prompt"] == prompt)


@pytest.mark.slow
def test_summaries_explain_each_arm(run_dir: Path) -> None:
    data = load_for_report(run_dir)
    s = summarize(data["results"])
    assert _by(s, "base")["verdict"] == "baseline"
    good = _by(s, "good")
    assert good["verdict_kind"] == breakeven.PAYS
    # 12 ms verify + 4 x 2 ms draft over 10 ms, give or take the last steps
    # drafting fewer and the first token coming with the prompt
    assert good["step_cost_tokens"] == pytest.approx(2.0, rel=0.05)
    assert good["break_even_len"] == good["step_cost_tokens"]
    # two paired rounds: their values and the call they make, no interval
    assert good["call"] == "faster" and good["speedup_ci"] is None and len(good["speedups"]) == 2
    assert good["speedup"] == pytest.approx(sum(good["speedups"]) / 2)
    poor = _by(s, "poor")
    assert poor["verdict_kind"] == breakeven.LOSES
    assert poor["needed_acceptance"] == pytest.approx((poor["step_cost_tokens"] - 1) / 3, rel=0.02)
    assert poor["step_cost_tokens"] == pytest.approx(1.8, rel=0.05)
    dead = _by(s, "dead")
    assert dead["verdict_kind"] == breakeven.STRUCTURAL  # (12 + 90) ms / 10 ms = 10.2 >= 4
    assert _by(s, "broke")["verdict_kind"] == breakeven.FAILED


def test_markdown_report(run_dir: Path) -> None:
    md = render(load_for_report(run_dir), "md")
    # the write-ups' table: arms down, prompts across, every round
    # each prompt's column says what its figures are: one tok/s per round, then the change
    assert ("| arm | prose: tok/s r1 / r2 (change vs baseline) | code: tok/s r1 / r2 (change vs baseline) | "
            "acceptance (prose / code) | verdict |") in md
    good_line = next(line for line in md.splitlines() if line.startswith("| good | "))
    assert good_line.count(" / ") >= 3 and "pays" in good_line
    assert "## Why: the step arithmetic" in md
    assert "can land at most 4" in md and "structural loss" in md
    assert "## Acceptance per draft position" in md
    assert re.search(r"\| poor \| prose \| conditional: [^|]+ \| 0% of \d+ \| — \|", md)
    assert re.search(r"\| poor \| prose \| unconditional: [^|]+ \| 0% \| — \|", md)
    assert "No verify-cost probe for this run" in md
    assert "faster" in md
    assert "## Greedy equivalence" in md and "drift / prose r1: char 4" in md
    assert "**broke** oom" in md


def test_csv_and_json_exports(run_dir: Path) -> None:
    data = load_for_report(run_dir)
    rows = list(csv.DictReader(io.StringIO(render(data, "csv"))))
    assert len(rows) == 6 * 2 * 2
    dead = next(r for r in rows if r["arm"] == "dead")
    assert dead["verdict_kind"] == breakeven.STRUCTURAL and float(dead["break_even_len"]) == pytest.approx(10.2, rel=0.05)
    saved = json.loads(render(data, "json"))
    assert saved["results"] == data["results"]  # exported as saved, analysis beside
    positions = {(p["arm"], p["prompt"]): p for p in saved["analysis"]["positions"]}
    # accepted [4, 2, 0] cycled: positions 2 and 4 are only reached by steps
    # that go on to accept them; the last steps of a round draft fewer
    good = positions[("good", "prose")]
    assert good["rates"][0] == pytest.approx(2 / 3, abs=0.05) and good["rates"][1] == good["rates"][3] == 1.0
    assert saved["analysis"]["predictions"] is None  # no probe, no guess


def test_prediction_matches_what_the_backend_does(run_dir: Path, tmp_path: Path) -> None:
    # The fake verifies any width in 1.2 target tokens: that is its T(w).
    t = [1.0] + [1.2] * 15
    probe = probes.Probe("fake", "none", "decode", tuple(range(1, 17)), (tuple(x * 0.01 for x in t),),
                         bandwidth_bytes_s=2e9, model_bytes=100 * 2**20)
    path = probes.save(probe, tmp_path / "p.json")
    data = load_for_report(run_dir, path)
    md = render(data, "md")
    assert "| arm | prompt | n_max | measured | predicted (error) | held out (error) |" in md
    preds = {(p["arm"], p["prompt"]): p for p in json.loads(render(data, "json"))["analysis"]["predictions"]}
    good = preds[("good", "prose")]
    assert good["predicted"] == pytest.approx(good["measured"], rel=0.05)
    dead = preds[("dead", "prose")]
    assert dead["best_predicted"] < 1  # no n_max saves a drafter that costs 3 tokens per drafted token
    assert "## Roofline" in md and "bounds plain decoding" in md


@pytest.mark.slow
def test_compare_two_saved_runs(run_dir: Path, tmp_path: Path) -> None:
    changed = ARMS.replace("accepted = [4, 2, 0]", "accepted = [0]")
    other = _run(tmp_path, changed, name="fake-b")
    a, b = load_for_report(run_dir), load_for_report(other)
    rows = {(r["arm"], r["prompt"]): r for r in compare(a, b)}
    good = rows[("good", "prose")]
    assert good["verdict_kind_a"] == breakeven.PAYS and good["verdict_kind_b"] == breakeven.LOSES
    assert {"speedup", "verdict", "acceptance"} <= set(good["changed"])
    assert not {"speedup", "verdict", "acceptance", "status"} & set(rows[("poor", "prose")]["changed"])
    md = render_compare(a, b, "md")
    assert "pays → loses" in md and "| poor | prose |" in md
    assert json.loads(render_compare(a, b, "json"))["cells"]
    assert list(csv.DictReader(io.StringIO(render_compare(a, b, "csv"))))


def test_cli_report_with_probe_and_compare(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    probe = probes.Probe("fake", "none", "decode", (1, 2, 3, 4, 5), ((0.01, 0.012, 0.012, 0.012, 0.012),))
    path = probes.save(probe, tmp_path / "probe.json")
    assert main(["report", str(run_dir), "--probe", str(path)]) == 0
    assert "predicted" in capsys.readouterr().out
    assert main(["report", str(run_dir), "--compare", str(run_dir), "--format", "md"]) == 0
    out = capsys.readouterr().out
    assert "0 of 12 shared cells changed" in out and "no change in kind" in out
    assert main(["report", str(run_dir), "--probe", str(tmp_path / "missing.json")]) == 2


def test_a_model_on_a_gpu_gets_no_roofline_from_the_hosts_bandwidth(run_dir: Path, tmp_path: Path) -> None:
    """A probe of a model on a GPU may carry the host's read bandwidth (a
    run's probe attaches the machine's); plain decoding there is bounded by
    the card's memory, so the report asks for that instead of dividing by
    the host's, unless one is given."""
    t = [1.0] + [1.2] * 15
    probe = probes.Probe("fake", "none", "decode", tuple(range(1, 17)), (tuple(x * 0.01 for x in t),),
                         bandwidth_bytes_s=2e9, model_bytes=100 * 2**20, notes={"n_gpu_layers": 999})
    assert probe.on_gpu
    path = probes.save(probe, tmp_path / "p.json")
    data = load_for_report(run_dir, path)
    md = render(data, "md")
    roof = md.split("## Roofline", 1)[1]
    assert "ran on a GPU" in roof and "read per token" not in roof.split("##", 1)[0]
    data["bandwidth_bytes_s"] = 4.8e12  # what `lab report --bandwidth 4800` sets
    roof = render(data, "md").split("## Roofline", 1)[1].split("##", 1)[0]
    assert "at 4800.0 GB/s (given) bounds plain decoding" in roof
    # the CPU-resident case keeps the probe's bandwidth
    assert not dataclasses.replace(probe, notes={"n_gpu_layers": 0}).on_gpu
