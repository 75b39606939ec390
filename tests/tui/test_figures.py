"""Live and saved figures are one set of figures: a run of the scripted
fake backend through the bridge (what the lanes show) and through the store
(what results.json keeps) gives each cell the same acceptance, mean
accepted length and step counts, and tok/s that differ only by the first
token, which the live rate leaves out because it lands with the prompt."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from lab.base import metrics
from lab.base.row import ResultRow
from lab.profile.load import parse_profile
from lab.runner import RunControl, Runner
from lab.store import RunStore, load_run
from lab.tui.bridge import EventBridge
from lab.tui.cadence import FULL
from lab.tui.messages import ArmMetrics, ArmMetricsUpdated, CellFinished
from tests.fakes import fake_registry, profile_toml

# 23 tokens: the first with the prompt, four steps of five, then a step
# that accepts four drafts of which the budget keeps two (landed 2, not 5).
ARMS = """
[[arms]]
name = "base"
backend = "fake"
options = { virtual_clock = true }

[[arms]]
name = "spec"
backend = "fake"
n_max = 4
options = { speculative = true, accepted = [4], overdraft = true, virtual_clock = true }

[[arms]]
name = "mixed"
backend = "fake"
n_max = 3
options = { speculative = true, accepted = [3, 0, 1], overdraft = true, virtual_clock = true }
"""


def test_live_figures_are_the_saved_figures(tmp_path: Path) -> None:
    registry = fake_registry()
    profile = parse_profile(profile_toml(ARMS, max_tokens=23, rounds=2, prompts=("prose", "code")), "p.toml", registry)
    posted: list[object] = []
    lock = threading.Lock()

    def post(message: object) -> None:
        with lock:
            posted.append(message)

    store = RunStore(profile, tmp_path)
    rows = Runner(profile, registry, store, [EventBridge(post, RunControl(), FULL)]).run()
    saved = {(r["arm"], r["prompt"], r["round"]): r for r in load_run(store.path)["results"]}

    live: dict[str, ArmMetrics] = {}
    checked = 0
    for message in posted:
        if isinstance(message, ArmMetricsUpdated):
            live[message.metrics.arm] = message.metrics
        if not isinstance(message, CellFinished):
            continue
        row = message.row
        assert isinstance(row, ResultRow) and row in rows
        disk = saved[(row.arm, row.prompt, row.round)]
        m = live[row.arm]
        assert (m.prompt, m.round) == (row.prompt, row.round)
        assert m.tokens == row.n_tokens == disk["n_tokens"]
        if row.is_baseline:
            assert m.steps == 0 and row.steps is None
        else:
            assert (m.steps, m.drafted, m.accepted) == (row.steps, row.drafted, row.accepted)
            assert m.acceptance_rate == row.acceptance_rate == disk["acceptance_rate"]
            assert m.mean_accepted_len == row.mean_accepted_len == disk["mean_accepted_len"]
            checked += 1
        assert m.tok_per_s is not None and row.n_tokens
        assert m.tok_per_s * row.n_tokens / (row.n_tokens - 1) == pytest.approx(disk["tok_per_s"], rel=1e-9)
    assert checked == 2 * 2 * 2
    spec = saved[("spec", "prose", 1)]
    # the step the budget cut shows in both: 22 tokens landed by 5 steps
    assert spec["mean_accepted_len"] == metrics.mean_accepted_len(22, 5) != (spec["accepted"] + 5) / 5
