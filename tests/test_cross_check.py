"""`lab predict --against RUN_DIR` (lab.analysis.cross_check): a CPU's
acceptance priced with a GPU's probes, set against the GPU run it predicted,
its error split into the acceptance's and the costs' parts. On the committed
H100 run (results/cross-machine/gpu-4/run-1): recorded probes, acceptance
files and rows, no engine."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from lab.analysis import acceptance_file as ap
from lab.analysis import cross_check
from lab.base import probe as probes
from lab.store import load_run

ROOT = Path(__file__).resolve().parents[1]
CPU = ROOT / "results" / "cross-machine" / "cpu" / "acceptance.json"
GPU = ROOT / "results" / "cross-machine" / "gpu-4" / "run-1"


def _checks(acceptance: Path, run: Path) -> list[cross_check.Check]:
    probe = probes.load(GPU / "cross-gpu-probe.json")
    draft = probes.load(GPU / "cross-gpu-draft-probe.json")
    got = [ap.predict_on(e, probe, draft) for e in ap.load(acceptance).entries]
    return cross_check.check(got, ap.load(run), load_run(run)["results"], probe, draft)


def _measured(run: Path, arm: str, prompt: str) -> float:
    """The run's speedup by hand: each round's tok/s over its baseline's."""
    rows = load_run(run)["results"]
    tok = {(r["arm"], r["prompt"], r["round"]): r["tok_per_s"] for r in rows if r["status"] == "ok" and r["round"] >= 1}
    return statistics.median(v / tok[("baseline", p, k)] for (a, p, k), v in tok.items() if a == arm and p == prompt)


def test_a_run_checked_against_its_own_acceptance_has_no_acceptance_part() -> None:
    """The GPU run's own acceptance file, priced with its machine's probes:
    the second prediction is the first, so the error is all the costs'."""
    checks = _checks(GPU / "run" / "acceptance.json", GPU / "run")
    assert [c.label for c in checks] == ["ngram / prose", "ngram / code", "draft-q4_0 / prose", "draft-q4_0 / code"]
    for c in checks:
        assert c.with_run_acceptance == pytest.approx(c.predicted) and c.landed_file == pytest.approx(c.landed_run)
        assert c.same_prompts and c.measured == pytest.approx(_measured(GPU / "run", *c.label.split(" / ")))


def test_the_cpus_code_text_keeps_fewer_lookups_on_the_gpu() -> None:
    """The CPU's file lands 2.12 tokens a step with the n-gram drafter on
    code; the GPU's own text, 1.85. Priced alike, the CPU's acceptance
    predicts a speedup the run cannot reach, and the run's brings it back."""
    checks = {c.label: c for c in _checks(CPU, GPU / "run")}
    code = checks["ngram / code"]
    theirs = {(e.arm, e.name): e for e in ap.load(GPU / "run").entries}
    assert code.landed_run == pytest.approx(theirs[("ngram", "code")].positions.expected_landed(4)[0])
    assert code.landed_file > code.landed_run
    err, again = (cross_check.Check.error(code.predicted, code.measured),
                  cross_check.Check.error(code.with_run_acceptance, code.measured))
    assert err is not None and again is not None and err > 0.2 and abs(again) < abs(err)
    assert all(c.same_prompts for c in checks.values())


def test_lab_predict_against_prints_both_errors_and_refuses_a_folder_without_a_run(tmp_path: Path) -> None:
    def lab(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "lab.cli", "predict", str(CPU), "--probe",
                               str(GPU / "cross-gpu-probe.json"), "--draft-probe", str(GPU / "cross-gpu-draft-probe.json"),
                               *args], cwd=tmp_path, capture_output=True, text=True, timeout=120)

    out = lab("--against", str(GPU / "run"))
    assert out.returncode == 0, out.stderr
    table = out.stdout.split("Against the run", 1)[1]
    row = next(line for line in table.splitlines() if line.strip().startswith("ngram / code"))
    assert "2.12 / 1.85" in row and row.count("%") == 2
    # another prompt text in the run's acceptance file is flagged on the row
    other = tmp_path / "other"
    shutil.copytree(GPU / "run", other, ignore=shutil.ignore_patterns("steps.jsonl", "gpu-samples.json.gz"))
    data = json.loads((other / "acceptance.json").read_text())
    for e in data["entries"]:
        e["prompt_sha256"] = ["0" * 64 for _ in e.get("prompt_sha256") or [0]]
    (other / "acceptance.json").write_text(json.dumps(data))
    flagged = lab("--against", str(other))
    assert flagged.returncode == 0, flagged.stderr
    assert all("⚠ other prompt text" in line for line in flagged.stdout.split("Against the run", 1)[1].splitlines()
               if line.strip().startswith(("ngram /", "draft-q4_0 /")))
    # a folder with no run in it: a clear error, nothing printed as if checked
    empty = lab("--against", str(tmp_path))
    assert empty.returncode == 2 and "results.json" in empty.stderr and "Against" not in empty.stdout
    # a surface of several depths: which depth the run decoded at is not known, so it is refused
    import dataclasses

    one = probes.load(GPU / "cross-gpu-probe.json")
    surface = probes.save_surface(probes.Surface((dataclasses.replace(one, depth=128),
                                                  dataclasses.replace(one, depth=2048))), tmp_path / "surface.json")
    deep = subprocess.run([sys.executable, "-m", "lab.cli", "predict", str(CPU), "--probe", str(surface),
                           "--against", str(GPU / "run")], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert deep.returncode == 2 and "one depth's probe" in deep.stderr and "Against" not in deep.stdout
