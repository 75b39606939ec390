"""The shape of latency: TTFT and inter-token percentiles from token arrival
times, per cell, in results.json, report.md and CSV."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from lab.base.events import Status
from lab.base.row import ResultRow
from lab.profile.load import parse_profile
from lab.render.report import load_for_report, render_csv, render_markdown
from lab.runner import Runner
from lab.store import RunStore
from lab.telemetry import latency
from tests.fakes import BASE_AND_SPEC, fake_registry, profile_toml


def test_percentile_interpolates_between_ranks() -> None:
    xs = [0.0, 10.0, 20.0, 30.0, 40.0]
    assert latency.percentile(xs, 50) == 20.0
    assert latency.percentile(xs, 95) == pytest.approx(38.0)  # rank 3.8: 30 + 0.8 * 10
    assert latency.percentile(xs, 0) == 0.0 and latency.percentile(xs, 100) == 40.0
    assert latency.percentile([], 50) is None
    with pytest.raises(ValueError):
        latency.percentile(xs, 101)


def test_a_burst_is_one_gap_then_zeros() -> None:
    # request at 10.0; first token at 10.5; then a burst of 3 at 10.7, one
    # token at 11.0, a burst of 2 at 11.4
    arrivals = [(10.5, 1), (10.7, 3), (11.0, 1), (11.4, 2)]
    assert latency.gaps(arrivals) == pytest.approx([0.2, 0.0, 0.0, 0.3, 0.4, 0.0])
    s = latency.shape(10.0, arrivals)
    assert s.ttft_s == pytest.approx(0.5)
    assert s.tokens == 7
    # sorted gaps 0, 0, 0, 0.2, 0.3, 0.4: p50 at rank 2.5, p95 at 4.75, p99 at 4.95
    assert s.itl_p50_s == pytest.approx(0.1)
    assert s.itl_p95_s == pytest.approx(0.3 + 0.75 * 0.1)
    assert s.itl_p99_s == pytest.approx(0.3 + 0.95 * 0.1)
    assert s.burst_share == pytest.approx(0.5)


def test_first_arrival_burst_and_empty_cells() -> None:
    # a first arrival of 3 tokens: its other two come with no gap
    assert latency.gaps([(1.0, 3), (1.5, 1)]) == pytest.approx([0.0, 0.0, 0.5])
    empty = latency.shape(0.0, [])
    assert empty.ttft_s is None and empty.itl_p50_s is None and empty.tokens == 0
    one = latency.shape(0.0, [(0.25, 1)])
    assert one.ttft_s == pytest.approx(0.25) and one.itl_p50_s is None


def test_held_time_is_taken_out_of_later_arrivals() -> None:
    clock = latency.ArrivalClock(start=100.0)
    clock.token(100.2, 1)
    clock.held(5.0)  # paused 5 s between steps
    clock.token(105.5, 1)
    s = clock.shape()
    assert s.ttft_s == pytest.approx(0.2)
    assert s.itl_p50_s == pytest.approx(0.3)


def test_latency_keys_round_trip_through_json() -> None:
    row = ResultRow(arm="a", backend="b", drafter=None, prompt="p", round=1, status=Status.OK,
                    ttft_s=0.5, itl_p50_s=0.01, itl_p95_s=0.02, itl_p99_s=0.03)
    saved = json.loads(json.dumps(row.to_json()))
    for k in latency.LATENCY_KEYS:
        assert k in saved
    back = ResultRow.from_json(saved)
    assert (back.ttft_s, back.itl_p50_s, back.itl_p95_s, back.itl_p99_s) == (0.5, 0.01, 0.02, 0.03)
    # a row saved before the keys existed reads them as None
    old = {k: v for k, v in saved.items() if k not in latency.LATENCY_KEYS}
    assert ResultRow.from_json(old).ttft_s is None


def test_runner_rows_carry_latency_and_the_report_shows_it(tmp_path: Path) -> None:
    registry = fake_registry()
    text = profile_toml(BASE_AND_SPEC + "\n", max_tokens=24).replace("[run]\n", "[run]\nprobe = false\n")
    profile = parse_profile(text, str(tmp_path / "p.toml"), registry)
    store = RunStore(profile, tmp_path)
    rows = Runner(profile, registry, store).run()
    base = next(r for r in rows if r.arm == "base")
    spec = next(r for r in rows if r.arm == "spec")
    # virtual clock: one target token every 0.01 s; a speculative step
    # lands its accepted drafts and the bonus token at one instant
    assert base.ttft_s is not None and base.ttft_s >= 0.01
    assert base.itl_p50_s == pytest.approx(0.01, abs=1e-6)
    assert base.itl_p99_s == pytest.approx(0.01, abs=1e-6)
    assert spec.itl_p50_s == pytest.approx(0.0, abs=1e-9)  # most tokens land inside a burst
    assert spec.itl_p99_s is not None and spec.itl_p99_s > base.itl_p99_s
    saved = json.loads((store.path / "results.json").read_text())["results"]
    assert all(r["itl_p95_s"] is not None for r in saved)
    data = load_for_report(store.path)
    md = render_markdown(data)
    section = md.split("## Latency", 1)[1].split("##", 1)[0]
    assert "| base | prose |" in section and "| spec | prose | " in section
    spec_line = next(line for line in section.splitlines() if line.startswith("| spec |"))
    assert spec_line.split("|")[4].strip() == "0.0"  # ITL p50 ms
    table = list(csv.DictReader(io.StringIO(render_csv(data))))
    assert float(table[0]["itl_p50_s"]) == pytest.approx(0.01, abs=1e-6)
