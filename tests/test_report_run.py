"""Report and compare on run directories made by real runs of the embedded
model, with a probe measured on the same engine."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lab.base import economics as breakeven
from lab.render.report import load_for_report, render
from tests.test_probe import engine_problem

PROFILE = """
[profile]
name = "report-{tag}"

[run]
max_tokens = 20
rounds = 2
warmup = 0
n_ctx = 1024
threads = 1
probe = false  # measured by `lab probe` into run a, below

[[prompts]]
name = "prose"
text = "Write two sentences about lighthouses."

[[arms]]
name = "baseline"
backend = "llamacpp"
model = "embedded:smollm2"

[[arms]]
name = "oracle"
backend = "llamacpp"
model = "embedded:smollm2"
drafter = "oracle"
n_max = {n_max}

{extra}"""

NGRAM = """
[[arms]]
name = "ngram"
backend = "llamacpp"
model = "embedded:smollm2"
drafter = "ngram"
n_max = {n_max}
"""


def lab(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lab.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def _real_run(tmp: Path, tag: str, n_max: int, ngram: bool) -> Path:
    extra = NGRAM.format(n_max=n_max) if ngram else ""
    (tmp / f"{tag}.toml").write_text(PROFILE.format(tag=tag, n_max=n_max, extra=extra))
    out = lab("run", f"{tag}.toml", "--out", "runs", "--quiet", cwd=tmp)
    assert out.returncode == 0, out.stderr
    return next(d for d in (tmp / "runs").iterdir() if d.name.endswith(f"-report-{tag}"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    why = engine_problem()
    if why:
        pytest.skip(why)
    tmp = tmp_path_factory.mktemp("real")
    a = _real_run(tmp, "a", 3, ngram=True)
    b = _real_run(tmp, "b", 5, ngram=False)
    probe = lab("probe", "--widths", "1-4", "--repeats", "2", "--threads", "1", "--out", str(a), "--quiet", cwd=tmp)
    assert probe.returncode == 0, probe.stderr
    return a, b


@pytest.mark.slow
def test_real_report_explains_every_arm(runs: tuple[Path, Path]) -> None:
    a, _ = runs
    data = load_for_report(a)
    assert data["probe"] is not None and data["steps"]
    md = render(data, "md")
    # two rounds, and any the run added while the paired speedups disagreed
    assert re.search(r"\| arm \| prose: tok/s r1 / r2( / r\d)* \(change vs baseline\) \| acceptance \(prose\) \| verdict \|", md)
    # the oracle replays the baseline: every draft position accepted
    assert "| oracle | prose | conditional" in md
    conditional = next(line for line in md.splitlines() if line.startswith("| oracle | prose | conditional"))
    assert "| 100% of" in conditional, conditional
    for line in ("## Why: the step arithmetic", "## Prediction", "## Statistics", "## Roofline"):
        assert line in md
    assert "No verify-cost probe" not in md
    prediction = md.split("## Prediction", 1)[1].split("\n## ", 1)[0]
    if "no trustworthy probe" in prediction:
        # a probe the machine's load left unsettled (the suite's workers share the cores) is refused, never priced with
        assert "No prediction: no trustworthy probe" in prediction, prediction
    else:
        oracle_pred = next(line for line in md.splitlines() if line.startswith("| oracle | prose | 3 |"))
        assert oracle_pred.count("x") >= 2  # measured and predicted speedups side by side
    saved = json.loads(render(data, "json"))
    kinds = {s["arm"]: s["verdict_kind"] for s in saved["analysis"]["summaries"]}
    assert kinds["baseline"] == breakeven.BASELINE
    # uncertain: its paired rounds disagreed (a busy machine, lab.telemetry.contention)
    assert kinds["oracle"] in (breakeven.PAYS, breakeven.EVEN, breakeven.LOSES, breakeven.STRUCTURAL, breakeven.UNCERTAIN)
    rows = list(csv.DictReader(io.StringIO(render(data, "csv"))))
    assert len(rows) == len(data["results"]) >= 3 * 2 and rows[0]["verdict_kind"] == "baseline"


@pytest.mark.slow
def test_real_compare(runs: tuple[Path, Path]) -> None:
    a, b = runs
    out = lab("report", str(a), "--compare", str(b), cwd=a)
    assert out.returncode == 0, out.stderr
    assert "| oracle | prose |" in out.stdout and "→" in out.stdout and "cells changed" in out.stdout
    assert "only in A" in out.stdout  # the ngram arm ran only in A
    j = json.loads(lab("report", str(a), "--compare", str(b), "--format", "json", cwd=a).stdout)
    cells = {(c["arm"], c["prompt"]): c for c in j["cells"]}
    assert cells[("oracle", "prose")]["in"] == "both"
    assert cells[("oracle", "prose")]["acceptance_rate_a"] == 1.0
