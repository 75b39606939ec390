"""End to end in the TUI on a real vLLM server (its CPU build) with the
embedded SmolLM2: an n-gram arm streams into its lane, lands drafts, and
its row's drafted and accepted counts are its steps' sums, which the
headless suite (tests/test_vllm.py) checks against vLLM's own counters.
Quitting the app leaves no vLLM process."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import pytest

from lab.store import load_run, load_steps
from tests.needs import need_vllm
from tests.tui.helpers import finished_run

pytestmark = [pytest.mark.anyio, pytest.mark.engine, pytest.mark.slow, pytest.mark.xdist_group("vllm")]

PROFILE = """
[profile]
name = "tui-vllm"

[run]
max_tokens = 24
rounds = 1
warmup = 0
n_ctx = 512

[[prompts]]
name = "repeat"
text = "Repeat this line three times: the quick brown fox jumps over the lazy dog."

[[arms]]
name = "ngram"
backend = "vllm"
model = "embedded:smollm2"
n_max = 3
options = { spec_method = "ngram", prompt_lookup_min = 2, prompt_lookup_max = 3 }
"""


def _vllm_processes() -> list[int]:
    out = []
    for p in psutil.Process(os.getpid()).children(recursive=True):
        try:
            if any("vllm" in part for part in p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


async def test_tui_runs_a_vllm_ngram_arm_and_leaves_no_server(tmp_path: Path) -> None:
    need_vllm()
    path = tmp_path / "vllm.toml"
    path.write_text(PROFILE, encoding="utf-8")
    async with finished_run(path, tmp_path / "runs", timeout=900) as (_pilot, screen, batches):
        run_dir = screen.session.run_dir
        row = load_run(run_dir)["results"][0]
        assert row["status"] == "ok", row["detail"]
        assert row["n_tokens"] == 24
        assert screen.lane("ngram").text.text == row["text"]
        assert screen.lane("ngram").status.value == "ok"
        assert batches and {b.cell.arm for b in batches} == {"ngram"}
        steps = [s for s in load_steps(run_dir) if s["arm"] == "ngram"]
        assert row["drafted"] and row["drafted"] == sum(s["drafted"] for s in steps)
        assert row["accepted"] == sum(s["accepted"] for s in steps)
        assert row["accepted"] > 0  # the n-gram drafts landed on this prompt
        # vLLM streams a step's tokens as one text, so the lane marks no
        # drafted characters (known gap; the counts above are exact)
    deadline = time.monotonic() + 30
    while _vllm_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _vllm_processes()
