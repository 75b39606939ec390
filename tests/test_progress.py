"""Headless progress reads as sentences once: one line per phase change,
never one per poll, never a word said twice in a row."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lab.base.events import Cell, Status, StatusChanged, arm_cell
from lab.cli.progress import Progress

DOUBLED = re.compile(r"\b(\w+) \1\b", re.IGNORECASE)


def _problems(lines: list[str]) -> list[str]:
    out = [f"repeated line: {a!r}" for a, b in zip(lines, lines[1:]) if a == b]
    out += [f"doubled word: {line!r}" for line in lines if DOUBLED.search(line)]
    return out


def test_a_phase_said_again_is_not_printed_again() -> None:
    buf = io.StringIO()
    progress = Progress(buf)
    arm = arm_cell("base")
    for _ in range(30):  # what a server's health poll used to send
        progress(StatusChanged(arm, Status.LOADING, phase="llama-server loading the model", progress=0.5))
    progress(StatusChanged(arm, Status.LOADING))  # no phase: the status says it
    progress(StatusChanged(Cell("base", "code", 0), Status.WARMUP, phase="warming up"))
    progress(StatusChanged(Cell("base", "code", 1), Status.RUNNING, phase="running"))
    lines = buf.getvalue().splitlines()
    assert lines == [
        "  [base] llama-server loading the model",
        "  [base] loading",
        "  [base code] warming up",
        "  [base code r1] running",
    ]
    assert not _problems(lines)


PROFILE = """
[profile]
name = "progress"

[run]
max_tokens = 8
rounds = 2
warmup = 1
probe = false

[[prompts]]
name = "code"
text = "Write a Python function that adds two numbers."

[[arms]]
name = "server"
backend = "llamacpp-server"
model = "tiny:llama"

[[arms]]
name = "inproc"
backend = "llamacpp"
model = "tiny:llama"
"""


@pytest.mark.engine
def test_a_real_server_run_says_each_phase_once(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    pytest.importorskip("gguf")
    from lab_llamacpp_server.binary import ServerNotFound, server_info

    try:
        server_info()
    except ServerNotFound as exc:  # pragma: no cover - depends on the machine
        pytest.skip(f"llama-server not found: {exc}")
    profile = tmp_path / "p.toml"
    profile.write_text(PROFILE, encoding="utf-8")
    res = subprocess.run([sys.executable, "-m", "lab.cli", "run", str(profile), "--out", str(tmp_path / "runs")],
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    assert not _problems(lines), "\n".join(lines)
    assert lines.count("  [server] llama-server loading the model") == 1
    for arm in ("server", "inproc"):
        assert lines.count(f"  [{arm} code] warming up") == 1
        assert lines.count(f"  [{arm} code r1] running") == 1 and lines.count(f"  [{arm} code r2] running") == 1
