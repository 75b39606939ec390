"""Every run committed under results/ renders again with `lab report`, in
Markdown and in JSON, whether its files are kept plain or gzip-compressed,
with nothing in it left out as unreadable: the evidence a results README
cites can always be re-rendered and checked."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from lab.base import rundir
from lab.cli import main

ROOT = Path(__file__).resolve().parents[1]
RUNS = sorted({p.parent.relative_to(ROOT) for p in (ROOT / "results").rglob("results.json*")
               if rundir.is_run_dir(p.parent)})


def test_there_are_committed_runs_some_of_them_compressed() -> None:
    assert len(RUNS) >= 50
    assert any(rundir.located(ROOT / r / rundir.RESULTS_FILE).name.endswith(".gz") for r in RUNS)
    assert any((ROOT / r / (rundir.STEPS_FILE + rundir.GZIP_SUFFIX)).exists() for r in RUNS)


def test_no_committed_file_is_over_a_mebibyte() -> None:
    big = [p for p in (ROOT / "results").rglob("*") if p.is_file() and p.stat().st_size > 1 << 20]
    assert big == []


def test_the_tracked_tree_stays_small() -> None:
    """At most 20 MiB tracked, no tracked file over 1 MiB: the tree travels
    whole to a GPU host (docs/gpu-host.md)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    sizes = {name: (ROOT / name).stat().st_size for name in out.decode().split("\0")
             if name and (ROOT / name).is_file()}
    assert sum(sizes.values()) <= 20 << 20
    assert sorted(n for n, size in sizes.items() if size > 1 << 20) == []


@pytest.mark.slow
@pytest.mark.parametrize("run", RUNS, ids=[str(r) for r in RUNS])
def test_a_committed_run_renders(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(ROOT / run)]) == 0
    md, err = capsys.readouterr()
    assert err == ""
    assert main(["report", str(ROOT / run), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert data["results"] and err == "" and "unreadable" not in data
    assert md.startswith(f"# {data['profile']['name']}")
    assert all(f"| {arm} |" in md for arm in {r["arm"] for r in data["results"]})
