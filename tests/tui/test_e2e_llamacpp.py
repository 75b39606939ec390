"""End to end on the real in-process llama.cpp backend with the embedded
SmolLM2: the TUI streams both arms, finishes and saves."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lab.store import load_run
from tests.tui.helpers import finished_run

pytestmark = [pytest.mark.anyio, pytest.mark.engine, pytest.mark.slow]

PROFILE = """
[profile]
name = "tui-e2e"

[run]
max_tokens = 32
rounds = 1
warmup = 0
n_ctx = 512
# what the TUI shows of a run needs no probe, and one engine thread is the cheapest beside other work
probe = false
threads = 1

[[prompts]]
name = "prose"
text = "Write two sentences about lighthouses."

[[arms]]
name = "baseline"
backend = "llamacpp"
model = "embedded:smollm2"

[[arms]]
name = "ngram"
backend = "llamacpp"
model = "embedded:smollm2"
drafter = "ngram"
n_max = 4
"""


PROBE = PROFILE.split("[[arms]]")[0].replace("max_tokens = 32", "max_tokens = 4") + """
[[arms]]
name = "baseline"
backend = "llamacpp"
model = "embedded:smollm2"
"""


def _engine_ready(tmp: Path) -> str | None:
    try:
        import llama_cpp  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - a half-built wheel raises more than ImportError
        return f"llama_cpp cannot be imported: {type(exc).__name__}: {exc}"
    # A wheel built for another CPU dies with SIGILL inside a kernel, which
    # no test can catch: run a few tokens headless in a child first.
    probe = tmp / "probe.toml"
    probe.write_text(PROBE, encoding="utf-8")
    cmd = [sys.executable, "-c", "import sys; from lab.cli import main; sys.exit(main(sys.argv[1:]))",
           "run", str(probe), "--out", str(tmp / "probe-runs"), "--quiet"]
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=300)
    except subprocess.TimeoutExpired:
        return "a headless run of the profile took more than 300 s"
    if proc.returncode != 0:
        tail = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
        return (f"llama.cpp fails on this machine headless too (exit {proc.returncode}: {tail[0][:200]}); "
                "rebuild it with scripts/setup.sh")
    return None


async def test_tui_runs_the_real_backend_streams_finishes_and_saves(tmp_path: Path) -> None:
    path = tmp_path / "e2e.toml"
    path.write_text(PROFILE, encoding="utf-8")
    reason = _engine_ready(tmp_path)
    if reason:
        pytest.skip(reason)
    async with finished_run(path, tmp_path / "runs", timeout=240) as (pilot, screen, batches):
        run_dir = screen.session.run_dir
        rows = {r["arm"]: r for r in load_run(run_dir)["results"]}
        assert {a: r["status"] for a, r in rows.items()} == {"baseline": "ok", "ngram": "ok"}, rows
        for arm in ("baseline", "ngram"):
            assert screen.lane(arm).text.text == rows[arm]["text"]
            assert screen.lane(arm).status.value == "ok"
            assert rows[arm]["n_tokens"] == 32
        # it streamed: text arrived in batches for both arms
        assert {b.cell.arm for b in batches} == {"baseline", "ngram"}
        assert rows["ngram"]["steps"] is not None and rows["ngram"]["steps"] >= 0
        (run_dir / "report.md").unlink()
        await pilot.press("w")
        await pilot.pause()
        assert (run_dir / "report.md").read_text().startswith("# tui-e2e")
        assert (run_dir / "comparison.csv").exists()
