"""Result rows: one typed row whose saved form is the results.json contract,
key for key, and which reads back, rows saved by earlier versions included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.base.events import Status
from lab.base.row import EXTRA_KEYS, RESULT_KEYS, ResultRow
from lab.profile.load import parse_profile
from lab.render.report import render
from lab.runner import Runner
from lab.store import RunStore, load_run
from tests.fakes import BASE_AND_SPEC, fake_registry, profile_toml

ARMS = BASE_AND_SPEC + """
[[arms]]
name = "oomer"
backend = "fake"
options = { mode = "oom" }
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[ResultRow], Path]:
    registry = fake_registry()
    profile = parse_profile(profile_toml(ARMS, max_tokens=30, rounds=2), "p.toml", registry)
    store = RunStore(profile, tmp_path_factory.mktemp("runs"))
    return Runner(profile, registry, store).run(), store.path


def test_a_row_saves_the_contract_keys_in_order_and_reads_back_equal(run: tuple[list[ResultRow], Path]) -> None:
    rows, run_dir = run
    saved = load_run(run_dir)["results"]
    assert sorted(r.status for r in rows) == [Status.OK] * 4 + [Status.OOM] * 2
    for row, disk in zip(rows, saved):
        assert list(disk) == list(RESULT_KEYS + EXTRA_KEYS)
        assert disk == row.to_json() == json.loads(json.dumps(row.to_json()))
        assert disk["status"] == row.status.value and isinstance(disk["status"], str)
        back = ResultRow.from_json(disk)
        assert back == row and back.status is row.status
        # the row reads as its saved form, so the analysis takes either
        assert dict(row) == disk and row["status"] == disk["status"]


def test_a_row_saved_before_later_keys_still_loads_and_reports(run: tuple[list[ResultRow], Path], tmp_path: Path) -> None:
    _, run_dir = run
    data = load_run(run_dir)
    for r in data["results"]:
        for key in ("text_origin", "plain_tokens", "measured", "engine_bytes"):
            del r[key]  # keys rows gained after the first saved runs
        r["ids"] = [1, 2, 3]  # a key this version does not know
    old = tmp_path / "old"
    old.mkdir()
    (old / "results.json").write_text(json.dumps(data))
    rows = [ResultRow.from_json(r) for r in load_run(old)["results"]]
    spec = next(r for r in rows if r.arm == "spec")
    assert spec.text_origin is None and spec.plain_tokens is None and spec.measured is None
    assert spec["ids"] == [1, 2, 3] and spec.to_json()["ids"] == [1, 2, 3]
    assert spec.mean_accepted_len is not None and spec.acceptance_rate is not None
    report = render(load_run(old), "md")
    assert "| spec | prose |" in report and "oomer" in report
