"""SIGTERM (what `timeout`, `kill` and service managers send) ends a real
`lab run` as Ctrl-C does: report.md written, the running cell and the rest
cancelled, every cell with a row, servers stopped, exit status 143. And
`lab probe` stopped by Ctrl-C keeps the repeats it finished, saved, with no
traceback."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import psutil
import pytest

llama = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[llamacpp]')")

PROFILE = """
[profile]
name = "sigterm"

[run]
max_tokens = 96
rounds = 3
warmup = 0
n_ctx = 1024
threads = 1
probe = false

[[prompts]]
name = "prose"
text = "Write two sentences about rivers."

[[arms]]
name = "baseline"
backend = "{backend}"
model = "embedded:smollm2"

[[arms]]
name = "spec"
backend = "{backend}"
model = "embedded:smollm2"
n_max = 3
{spec}
"""
IN_PROCESS = 'drafter = "ngram"'
SERVER = 'options = { spec_type = "ngram-mod" }'


def _start(cmd: list[str], cwd: Path) -> subprocess.Popen[str]:
    # Default dispositions, as a terminal gives them: a runner started in
    # the background would hand its children SIGINT ignored.
    return subprocess.Popen(
        [sys.executable, "-m", "lab.cli", *cmd], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _wait(proc: subprocess.Popen[str], cond: Callable[[], bool], what: str, timeout: float = 400) -> None:
    deadline = time.time() + timeout
    while not cond():
        if proc.poll() is not None:
            raise AssertionError(f"lab ended before {what}: {proc.stderr.read() if proc.stderr else ''}")
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _first_row(tmp_path: Path) -> Path | None:
    for found in (tmp_path / "runs").glob("*/results.json"):
        try:
            if json.loads(found.read_text())["results"]:
                return found
        except (ValueError, KeyError):  # caught between two writes
            continue
    return None


def _server_ready() -> bool:
    try:
        from lab_llamacpp_server.binary import server_info

        server_info()
    except Exception:  # noqa: BLE001 - any reason there is no server here
        return False
    return True


@pytest.mark.slow
@pytest.mark.parametrize("backend", [
    "llamacpp",
    pytest.param("llamacpp-server", marks=pytest.mark.skipif(not _server_ready(), reason="llama-server not found")),
])
def test_sigterm_mid_run_keeps_what_was_measured(tmp_path: Path, backend: str) -> None:
    spec = IN_PROCESS if backend == "llamacpp" else SERVER
    (tmp_path / "p.toml").write_text(PROFILE.format(backend=backend, spec=spec))
    proc = _start(["run", "p.toml", "--out", "runs"], tmp_path)
    engines: set[int] = set()
    try:
        _wait(proc, lambda: _first_row(tmp_path) is not None, "the first row")
        # the engine processes it started (llama-server), to check they go
        engines = {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    assert "terminated (SIGTERM)" in err and "Traceback" not in err
    results = _first_row(tmp_path)
    assert results is not None
    data = json.loads(results.read_text())
    statuses = [r["status"] for r in data["results"]]
    assert statuses[0] == "ok" and "cancelled" in statuses
    assert len(statuses) == 2 * 3  # every cell has a row
    assert not {"error", "crashed", "failed"} & set(statuses)
    assert data["cancelled"] is True and data["finished"]
    report = (results.parent / "report.md").read_text()
    assert "cancelled" in report
    if backend == "llamacpp-server":
        assert engines, "the server arm started no process"
    alive = [pid for pid in engines if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"engine processes outlived the run: {alive}"


@pytest.mark.slow
def test_probe_stopped_by_ctrl_c_saves_the_repeats_it_finished(tmp_path: Path) -> None:
    out = tmp_path / "probe.json"
    proc = _start(["probe", "--backend", "llamacpp", "--model", "embedded:smollm2", "--widths", "1-4",
                   "--repeats", "200", "--threads", "1", "--no-bandwidth", "--out", str(out)], tmp_path)
    seen: list[str] = []

    def second_repeat() -> bool:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        seen.append(line)
        return "cycle 3:" in line  # two cycles of every width finished

    try:
        _wait(proc, second_repeat, "two finished repeats")
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, "".join(seen) + stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    assert "probe stopped after" in stderr
    saved = json.loads(out.read_text())
    assert saved["widths"] == [1, 2, 3, 4]
    assert len(saved["seconds"]) >= 2 and all(len(r) == 4 for r in saved["seconds"])
    assert "after" in saved["notes"]["interrupted"]
    assert f"saved: {out}" in stdout
