"""Rounds are repeats: an ngram-mod llama-server arm, whose n-gram table
outlives a request, drafts the same in every cold round (the backend
restarts its server between rounds), and drafts more in later warm rounds,
which the report says, holding its later rounds' greedy output to its cold
first round. Real llama-server on the embedded SmolLM2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.test_server_engine import _server_pids, needs_server

pytestmark = pytest.mark.engine

PROFILE = """
[run]
max_tokens = 48
rounds = 3
# the test reads each round: no rounds added for noise
max_rounds = 3
warmup = 0
n_ctx = 512
threads = 1
probe = false
warm_rounds = {warm}
[[prompts]]
name = "code"
text = "Write a Python class LRUCache with get and put methods, using a dict and a doubly linked list."
[[arms]]
name = "base"
backend = "llamacpp-server"
model = "embedded:smollm2"
[[arms]]
name = "ngram"
backend = "llamacpp-server"
model = "embedded:smollm2"
n_max = 16
# a short match, so that 48 tokens draft at all; the table still grows with every request
options = {{ spec_type = "ngram-mod", extra_args = ["--spec-ngram-mod-n-match", "4", "--spec-ngram-mod-n-min", "1"] }}
"""


def _run(tmp_path: Path, warm: bool) -> tuple[list[dict[str, Any]], Path]:
    from lab.profile.load import parse_profile
    from lab.registry import load_registry
    from lab.runner import Runner
    from lab.store import RunStore

    registry = load_registry()
    profile = parse_profile(PROFILE.format(warm=str(warm).lower()), str(tmp_path / "p.toml"), registry)
    store = RunStore(profile, tmp_path / "runs")
    rows = [r.to_json() for r in Runner(profile, registry, store, []).run()]
    return rows, store.path


def _drafted(rows: list[dict[str, Any]]) -> list[int]:
    spec = sorted((r for r in rows if r["arm"] == "ngram"), key=lambda r: r["round"])
    assert all(r["status"] == "ok" for r in spec), [(r["round"], r["detail"][:200]) for r in spec]
    return [int(r["drafted"]) for r in spec]


@needs_server
def test_cold_rounds_draft_as_the_first(tmp_path: Path) -> None:
    from lab_llamacpp_server.backend import LlamaServerBackend

    from lab.api import ROUND_STATES

    assert LlamaServerBackend.round_state({"spec_type": "ngram-mod"}) == "restart"
    assert LlamaServerBackend.round_state({"spec_type": "none"}) in ROUND_STATES
    rows, _ = _run(tmp_path, warm=False)
    drafted = _drafted(rows)
    assert drafted[0] > 0
    assert drafted[1:] == [drafted[0], drafted[0]]
    spec = sorted((r for r in rows if r["arm"] == "ngram"), key=lambda r: r["round"])
    # the restart happened outside the cells' clocks, and is recorded
    assert [r["engine_report"].get("round_reset_s") is not None for r in spec] == [False, True, True]
    assert all(r["warm"] is False for r in rows)
    # the same greedy output every round
    assert len({r["text"] for r in spec}) == 1
    assert _server_pids() == []


@needs_server
def test_warm_rounds_learn_and_the_report_says_so(tmp_path: Path) -> None:
    from lab.render.report import write_report

    rows, run_dir = _run(tmp_path, warm=True)
    drafted = _drafted(rows)
    # the server's n-gram table remembers round 1's output: round 2 drafts more
    assert drafted[1] > drafted[0]
    assert all(r["warm"] is True for r in rows)
    # greedy identity: round 1 against its baseline, the later rounds against that cold first round
    spec = sorted((r for r in rows if r["arm"] == "ngram"), key=lambda r: r["round"])
    assert [r["identity_reference"] for r in spec] == ["baseline", "cold first round", "cold first round"]
    assert all(r["identical_to_baseline"] is (r["text"] == spec[0]["text"]) for r in spec[1:])
    report = write_report(run_dir).read_text(encoding="utf-8")
    assert "against its cold first round" in report
    assert "Rounds: warm" in report
    assert "rounds are not repeats" in report
    assert "warm rounds, tok/s" in report
    assert _server_pids() == []
