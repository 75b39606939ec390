"""A first run that cannot mislead: when a run's cells ran on fewer cores
than the machine has, or beside other work, the report's headline and the
printed summary say the figures are not comparable with a quiet machine's
and what to do; no bare verdict then."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab.analysis.comparable import HEADLINE_MARK, headline, reasons

QUIET = {"asked": 0, "cores": 2, "others_cores": 0.1, "used": 2}
SQUEEZED = {"asked": 0, "cores": 2, "others_cores": 2.01, "used": 1}


def _row(arm: str, contended: bool = False, round: int = 1) -> dict[str, object]:
    return {"arm": arm, "prompt": "p", "round": round, "status": "ok", "contended": contended}


def test_a_quiet_run_has_no_headline() -> None:
    assert headline([_row("base"), _row("ng")], QUIET) is None
    assert headline([_row("base")], None) is None


def test_fewer_cores_than_the_machine_has_is_said_with_what_to_do() -> None:
    line = headline([_row("base"), _row("ng")], SQUEEZED)
    assert line is not None and line.startswith(HEADLINE_MARK)
    assert "1 of 2 cores" in line and "2.01" in line
    assert "close other work" in line and "`threads = 2`" in line


def test_busy_cells_are_said_even_with_every_core() -> None:
    why = reasons([_row("base", contended=True), _row("ng"), _row("ng", contended=True, round=0)], QUIET)
    # the warmup (round 0) is not a measured cell
    assert why == ["1 of 2 cells ran beside other work"]


@pytest.mark.slow
def test_report_headline_and_marked_verdicts(tmp_path: Path) -> None:
    from lab.profile.load import parse_profile
    from lab.render.report import load_for_report, render_markdown
    from lab.runner import Runner
    from lab.store import RunStore
    from tests.fakes import fake_registry, profile_toml

    registry = fake_registry()
    arms = ('[[arms]]\nname = "base"\nbackend = "fake"\noptions = { virtual_clock = true }\n'
            '[[arms]]\nname = "ng"\nbackend = "fake"\nn_max = 3\n'
            'options = { speculative = true, accepted = [0], virtual_clock = true }\n')
    profile = parse_profile(profile_toml(arms, max_tokens=20), "t.toml", registry)
    store = RunStore(profile, tmp_path)
    Runner(profile, registry, store).run()
    data = load_for_report(store.path)
    # the cores alone decide here, however busy this machine was while the fake ran
    data["results"] = [{**r, "contended": False} for r in data["results"]]
    squeezed = {**data, "machine": {**(data.get("machine") or {}), "threads": SQUEEZED}}
    md = render_markdown(squeezed)
    assert md.index(HEADLINE_MARK) < md.index("| arm |"), "the headline goes above the table"
    ng_line = next(line for line in md.splitlines() if line.startswith("| ng |"))
    assert "⚠ not comparable" in ng_line
    base_line = next(line for line in md.splitlines() if line.startswith("| base |"))
    assert "not comparable" not in base_line
    quiet = render_markdown({**data, "machine": {**(data.get("machine") or {}), "threads": QUIET}})
    assert HEADLINE_MARK not in quiet and "⚠ not comparable" not in quiet


@pytest.mark.engine
@pytest.mark.slow
def test_a_run_beside_a_cpu_burner_prints_the_not_comparable_headline(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    (tmp_path / "p.toml").write_text("""
[profile]
name = "burner"
[run]
max_tokens = 8
rounds = 1
warmup = 0
threads = 0
probe = false
[[prompts]]
name = "p"
text = "Say hello."
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
""", encoding="utf-8")
    spin = "import time\nend = time.time() + 600\nwhile time.time() < end: pass\n"
    burners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(os.cpu_count() or 2)]
    try:
        time.sleep(1.0)  # the burners are running before the run looks at the machine
        done = subprocess.run([sys.executable, "-m", "lab.cli", "run", "p.toml", "--out", "runs", "--quiet"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=600)
    finally:
        for b in burners:
            b.kill()
            b.wait()
    assert done.returncode == 0, done.stderr
    assert HEADLINE_MARK in done.stdout, done.stdout
    assert done.stdout.index(HEADLINE_MARK) < done.stdout.index("arm ")
    report = next((tmp_path / "runs").iterdir()) / "report.md"
    assert HEADLINE_MARK in report.read_text(encoding="utf-8")
