"""The `lab` command end to end on the real embedded model: run, saved run
directory, reports, Ctrl-C."""

from __future__ import annotations

import csv
import io
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab.base.row import RESULT_KEYS

llama = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[llamacpp]')")

PROFILE = """
[profile]
name = "cli-smoke"

[run]
max_tokens = {max_tokens}
rounds = {rounds}
# the tests count rows: no rounds added for noise
max_rounds = {rounds}
warmup = 0
n_ctx = 1024
probe = false

[[prompts]]
name = "prose"
text = "Write two sentences about rivers."

[[arms]]
name = "baseline"
backend = "llamacpp"
model = "embedded:smollm2"

[[arms]]
name = "ngram"
backend = "llamacpp"
model = "embedded:smollm2"
drafter = "ngram"
n_max = [2, 4]
"""


def lab(*args: str, cwd: Path, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lab.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=600, **kw)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("cli")
    (tmp / "p.toml").write_text(PROFILE.format(max_tokens=24, rounds=2))
    out = lab("run", "p.toml", "--out", "runs", cwd=tmp)
    assert out.returncode == 0, out.stderr
    assert "baseline" in out.stdout and "ngram-nmax4" in out.stdout  # the comparison table
    assert "[ngram-nmax2 prose r2]" in out.stderr  # progress
    dirs = list((tmp / "runs").iterdir())
    assert len(dirs) == 1 and dirs[0].name.endswith("-cli-smoke")
    return dirs[0]


@pytest.mark.slow
def test_run_directory_holds_the_contract(run_dir: Path) -> None:
    assert {p.name for p in run_dir.iterdir()} >= {"profile.toml", "results.json", "steps.jsonl", "report.md"}
    data = json.loads((run_dir / "results.json").read_text())
    assert data["profile"]["name"] == "cli-smoke"
    assert len(data["results"]) == 3 * 2
    for row in data["results"]:
        assert set(RESULT_KEYS) <= set(row)
        assert row["status"] == "ok"
    steps = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]
    assert {s["arm"] for s in steps} == {"ngram-nmax2", "ngram-nmax4"}
    assert (run_dir / "profile.toml").read_text() == PROFILE.format(max_tokens=24, rounds=2)


@pytest.mark.slow
def test_report_formats(run_dir: Path) -> None:
    md = lab("report", str(run_dir), cwd=run_dir)
    assert md.returncode == 0 and "| ngram-nmax2 | prose |" in md.stdout
    c = lab("report", str(run_dir), "--format", "csv", cwd=run_dir)
    rows = list(csv.DictReader(io.StringIO(c.stdout)))
    assert len(rows) == 6 and set(RESULT_KEYS) <= set(rows[0])
    j = lab("report", str(run_dir), "--format", "json", cwd=run_dir)
    assert json.loads(j.stdout)["results"][0]["arm"] == "baseline"
    bad = lab("report", str(run_dir / "nope"), cwd=run_dir)
    assert bad.returncode == 2 and "results.json" in bad.stderr


@pytest.mark.slow
def test_broken_profile_exits_2_with_location(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text(PROFILE.format(max_tokens=24, rounds=2).replace("n_max = [2, 4]", "n_max = [2, 4]\nbogus = 1"))
    out = lab("run", "bad.toml", cwd=tmp_path)
    assert out.returncode == 2
    assert "bad.toml:" in out.stderr and "arms[1].bogus" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_doctor_and_plugins(tmp_path: Path) -> None:
    out = lab("doctor", cwd=tmp_path)
    assert "llama-cpp-python" in out.stdout and "embedded:smollm2" in out.stdout
    out = lab("plugins", cwd=tmp_path)
    assert out.returncode == 0 and "draft-model" in out.stdout


@pytest.mark.slow
def test_ctrl_c_keeps_what_was_measured(tmp_path: Path) -> None:
    # Long enough that the run is still going when the first row lands, short
    # enough that a loaded machine gets there.
    (tmp_path / "p.toml").write_text(PROFILE.format(max_tokens=96, rounds=3))
    # A test runner started in the background inherits SIGINT ignored, and so
    # would the lab: give it the default disposition a terminal gives.
    proc = subprocess.Popen([sys.executable, "-m", "lab.cli", "run", "p.toml", "--out", "runs"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.time() + 400
        results = None
        while time.time() < deadline:
            found = list((tmp_path / "runs").glob("*/results.json"))
            if found:
                data = json.loads(found[0].read_text())
                if len(data["results"]) >= 1:
                    results = found[0]
                    break
            time.sleep(0.2)
        assert results is not None, "no result was written in time"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted" in err
    data = json.loads(results.read_text())
    statuses = [r["status"] for r in data["results"]]
    assert statuses[0] == "ok" and "cancelled" in statuses
    assert len(statuses) == 3 * 3  # every cell has a row
    assert data["cancelled"] is True and data["finished"]
    assert (results.parent / "report.md").exists()
