"""Concurrency sweeps on server arms: the figures N streams add up to, the
report's section, and a 1/2/4 sweep on a real llama-server with SmolLM2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lab.kit.server.concurrency import StreamRecord, percentile, stream_summary
from lab.render import serving as serving_lines
from lab.rows import serving


def test_percentile_interpolates_between_ranks() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0], 99) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert percentile([4.0, 1.0, 3.0, 2.0], 100) == 4.0


def _record(t_sent: float, arrivals: list[tuple[float, int]], drafted: int = 0, accepted: int = 0) -> StreamRecord:
    return StreamRecord(t_sent, arrivals, {"timings": {"draft_n": drafted, "draft_n_accepted": accepted}})


def test_stream_summary_add_up_the_streams() -> None:
    a = _record(0.0, [(1.0, 1), (2.0, 1), (3.0, 2)], drafted=4, accepted=1)
    b = _record(0.5, [(2.0, 1), (4.0, 1)], drafted=2, accepted=1)
    fig = stream_summary([a, b])
    assert fig["concurrency"] == 2
    assert fig["tokens_total"] == 6
    # from the first send (0.0) to the last token (4.0)
    assert fig["aggregate_tok_per_s"] == pytest.approx(6 / 4.0)
    # after the first token: 3 tokens in 2 s, and 1 token in 2 s
    assert fig["stream_tok_per_s"] == [pytest.approx(1.5), pytest.approx(0.5)]
    assert fig["ttft_p50_s"] == pytest.approx((1.0 + 1.5) / 2)
    # gaps: a 1, 1, 0 (a chunk of two: the second came along); b 2
    assert sorted([*a.gaps(), *b.gaps()]) == [0.0, 1.0, 1.0, 2.0]
    assert fig["acceptance_rate_all"] == pytest.approx(2 / 6)


def test_a_failed_stream_is_counted_apart() -> None:
    bad = StreamRecord(0.0, error="HTTP 503")
    fig = stream_summary([_record(0.0, [(1.0, 1), (2.0, 1)]), bad])
    assert fig["streams_ok"] == 1 and fig["stream_errors"] == ["HTTP 503"]
    assert fig["tokens_total"] == 2


def test_row_fields_and_report_section() -> None:
    def row(arm: str, group: str, level: int, agg: float, base: dict[str, Any] | None) -> dict[str, Any]:
        report = {"concurrency": {"concurrency": level, "aggregate_tok_per_s": agg, "stream_tok_per_s": [agg / level],
                                  "acceptance_rate_all": None if base is None else 0.5}}
        fields = serving.row_fields(report, base)
        return {"arm": arm, "group": group, "status": "ok", "is_baseline": base is None,
                "baseline_arm": None, "drafted": None if base is None else 10, **fields}

    b1 = row("b-c1", "b", 1, 100.0, None)
    b4 = row("b-c4", "b", 4, 300.0, None)
    s1 = row("s-c1", "s", 1, 150.0, b1)
    s4 = row("s-c4", "s", 4, 240.0, b4)
    assert s1["aggregate_speedup"] == pytest.approx(1.5)
    assert s4["aggregate_speedup"] == pytest.approx(0.8)
    assert serving.row_fields({}, None)["concurrency"] is None
    lines = serving_lines.concurrency_lines([b1, b4, s1, s4])
    text = "\n".join(lines)
    assert "| s-c4 | 4 | 240.0 | 0.80x |" in text
    assert "stops paying at concurrency 4" in text
    assert serving_lines.concurrency_lines([{"arm": "x", "status": "ok"}]) == []
    # an arm that never drafted has no speedup to speak of
    idle = [dict(r, drafted=0) if r["arm"].startswith("s-") else r for r in (b1, b4, s1, s4)]
    assert "drafted nothing at any level" in "\n".join(serving_lines.concurrency_lines(idle))


# -- a real llama-server --------------------------------------------------------------------------

HEAD = """
[run]
max_tokens = 24
rounds = 1
warmup = 0
n_ctx = 512
threads = 1
# the streams, not their prediction (tests/test_server_probe.py prices a row of several streams)
probe = false
[[prompts]]
name = "code"
text = "Write a Python class LRUCache with get and put methods, using a dict and a doubly linked list."
[[arms]]
name = "base"
backend = "llamacpp-server"
model = "embedded:smollm2"
concurrency = [1, 2, 4]
[[arms]]
name = "self"
backend = "llamacpp-server"
model = "embedded:smollm2"
n_max = 4
concurrency = [1, 2, 4]
options = { spec_type = "draft-simple", draft_model = "embedded:smollm2" }
"""


@pytest.mark.engine
def test_sweep_1_2_4_on_llama_server_reports_aggregate_and_speedup(tmp_path: Path) -> None:
    from tests.test_server_engine import _registry, _server_pids, needs_server

    if needs_server.args[0]:
        pytest.skip(needs_server.kwargs["reason"])
    from lab.profile.load import parse_profile
    from lab.registry import load_registry
    from lab.render.report import ReportWriter
    from lab.runner import Runner
    from lab.store import RunStore

    load_registry()
    registry = _registry()
    profile = parse_profile(HEAD, str(tmp_path / "p.toml"), registry)
    by_name = {a.name: a for a in profile.arms}
    # each level is compared with the baseline at the same level
    assert by_name["self-concurrency4"].baseline == "base-concurrency4"
    store = RunStore(profile, tmp_path / "runs")
    rows = Runner(profile, registry, store, [ReportWriter()]).run()
    assert all(r["status"] == "ok" for r in rows), [(r["arm"], r["status"], r["detail"][:300]) for r in rows]
    by_arm = {r["arm"]: r for r in rows}
    for level in (1, 2, 4):
        for group in ("base", "self"):
            row = by_arm[f"{group}-concurrency{level}"]
            conc = row["engine_report"]["concurrency"]
            assert row["concurrency"] == level and conc["streams_ok"] == level
            assert conc["tokens_total"] == 24 * level
            assert row["aggregate_tok_per_s"] > 0
            assert row["n_tokens"] == 24
        spec = by_arm[f"self-concurrency{level}"]
        rep = spec["engine_report"]
        assert spec["aggregate_speedup"] is not None
        # every stream's steps, summed, are the server's counters
        assert rep["counts_match_server"] is True, rep["checks"]
        if level > 1:
            assert rep["checks"]["streams_vs_metrics"] is True
            # the model drafting for itself: every stream accepts every drafted token
            assert spec["aggregate_acceptance_rate"] == pytest.approx(1.0)
    # one stream at a time gives the same greedy text as the plain path
    assert by_arm["self-concurrency2"]["identical_to_baseline"] is not None
    report = (store.path / "report.md").read_text()
    section = report.split("## Concurrency", 1)[1]
    for level in (1, 2, 4):
        line = next(ln for ln in section.splitlines() if ln.startswith(f"| self-concurrency{level} |"))
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[1] == str(level)
        assert float(cells[2]) > 0  # aggregate tok/s
        assert cells[3].endswith("x")  # speedup against the baseline at this level
    assert "**self** speedup by concurrency" in section
    assert _server_pids() == []
