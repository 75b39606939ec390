"""The llama-server plugin's parsing and bookkeeping, with no server: log
lines, stream grouping, live steps joined from log and stream, /metrics
text, count cross-checks, option handling."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from lab_llamacpp_server import crosscheck, logparse
from lab_llamacpp_server.backend import LlamaDFlashBackend, LlamaMtpBackend, LlamaServerBackend
from lab_llamacpp_server.binary import parse_build, parse_spec_types
from lab_llamacpp_server.metrics import counter_delta, parse_metrics, per_position
from lab_llamacpp_server.serverlog import ServerLog
from lab_llamacpp_server.steps import LiveSteps
from lab_llamacpp_server.stream import StepTracker, chunk_from

from lab.base.events import Cell, Clock, StepEvent
from lab.kit.server.sse import parse_sse_lines
from lab.profile.load import parse_profile


@pytest.fixture(scope="module")
def server_registry() -> Any:
    """The installed plugins, plus this one when its entry point is not
    installed yet (a checkout not re-installed since the plugin landed)."""
    import lab_llamacpp_server

    from lab.registry import load_registry

    reg = load_registry()
    if "llamacpp-server" not in reg.backends:
        reg = load_registry([lab_llamacpp_server.plugin])
    return reg


def test_log_prefix_and_accepted_line() -> None:
    line = logparse.split_line("1.02.003.004 I slot update_slots: id  0 | task 5 | accepted  3/ 4 draft tokens")
    assert line.t_us == ((60 + 2) * 1000 + 3) * 1000 + 4
    assert line.level == "I"
    acc = logparse.parse_accepted(line)
    assert acc is not None and (acc.accepted, acc.drafted, acc.restore) == (3, 4, False)
    restore = logparse.parse_accepted(logparse.split_line(
        "0.00.100.000 I slot update_slots: id  0 | task 5 | accepted  1/ 4 draft tokens (restore checkpoint)"))
    assert restore is not None and restore.restore
    assert logparse.parse_accepted(logparse.split_line("0.00.100.000 I srv  ready")) is None
    debug = "0.00.100.000 D slot update_slots: id  0 | task 5 | accepted 3/4 draft tokens, new n_tokens = 40"
    assert logparse.parse_accepted(logparse.split_line(debug)) is None


def test_statistics_and_request_lines() -> None:
    st = logparse.parse_stats(logparse.split_line(
        "0.05.000.000 I spec common_specu: statistics     draft-simple: #calls(b,g,a) =    2     40     38, "
        "#gen drafts =     40, #acc drafts =    35, #gen tokens =    160, #acc tokens =   120, "
        "#mean acc len = 4.16, #acc rate/pos = (0.9, 0.8), dur(b,g,a) = 1.500, 250.250, 0.125 ms"))
    assert st is not None
    assert (st.impl, st.calls_draft, st.gen_tokens, st.acc_tokens) == ("draft-simple", 40, 160, 120)
    assert st.draft_ms == pytest.approx(250.25)
    summary = logparse.parse_request_acceptance(logparse.split_line(
        "0.05.000.000 I slot print_timing: id  0 | task 5 | draft acceptance = 0.75000 (  120 accepted /   160 generated), mean len =  4.00"))
    assert summary is not None and (summary.accepted, summary.generated) == (120, 160)
    ev = logparse.parse_eval_time(logparse.split_line(
        "0.05.000.000 I slot print_timing: id  0 | task 5 |        eval time =     300.00 ms /    48 tokens (    6.25 ms per token,   160.00 tokens per second)"))
    assert ev == (300.0, 48)
    assert logparse.parse_eval_time(logparse.split_line(
        "0.05.000.000 I slot print_timing: id  0 | task 5 | prompt eval time =      30.00 ms /    20 tokens")) is None


def test_buffers_and_oom_lines() -> None:
    buf = logparse.parse_buffer(logparse.split_line("0.00.001.000 I load_tensors:   CPU_Mapped model buffer size =    98.00 MiB"))
    assert buf == ("CPU_Mapped", "model", 98 * 1024 * 1024)
    assert logparse.is_oom("ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 1000 GiB")
    assert logparse.is_oom('{"error":{"code":500,"message":"Compute error."}}')
    assert not logparse.is_oom("srv  load_model: loading model")


def test_spec_types_and_build_from_help() -> None:
    help_text = "--spec-type [none|draft-simple|draft-mtp|draft-dflash|ngram-mod]\n                comma-separated list"
    assert parse_spec_types(help_text) == ("none", "draft-simple", "draft-mtp", "draft-dflash", "ngram-mod")
    assert parse_build("version: 11434 (abcdef0)\nbuilt with cc") == 11434
    assert parse_build("version: 0.6.0-dev (build 11434, commit abc)") == 11434
    assert parse_build("version: 0.6.0-dev (build 0, commit unknown)") is None
    assert parse_spec_types("no such option") == ()


def _chunk(predicted: int, draft_n: int, acc: int, t: float, ids: list[int] | None = None) -> dict[str, Any]:
    return {"content": "x", "tokens": ids if ids is not None else [predicted],
            "timings": {"predicted_n": predicted, "draft_n": draft_n, "draft_n_accepted": acc}, "stop": False}


def test_stream_groups_steps_and_marks_drafted_tokens() -> None:
    tracker = StepTracker(0.0)
    flags: list[bool] = []
    prev = 0
    # token 1: from prompt processing; step 1: drafted 3, accepted 2 (lands 3);
    # one plain token (empty draft); step 2: drafted 3, accepted 0 (lands 1)
    seq = [(1, 0, 0), (2, 3, 2), (3, 3, 2), (4, 3, 2), (5, 3, 2), (6, 6, 2)]
    for i, (p, d, a) in enumerate(seq):
        c = chunk_from(_chunk(p, d, a, float(i)), prev, float(i + 1))
        prev = c.predicted_n
        flags.append(tracker.feed(c))
    assert flags == [False, True, True, False, False, False]
    assert [(s.drafted, s.accepted, s.landed) for s in tracker.steps] == [(3, 2, 3), (3, 0, 1)]
    assert tracker.plain_tokens == 2
    assert tracker.steps[0].after_step is False and tracker.steps[1].after_step is False


def test_stream_chunk_standing_for_held_back_tokens() -> None:
    # the server held a token back (incomplete UTF-8): one chunk, two tokens
    c = chunk_from(_chunk(3, 0, 0, 0.0, ids=[77]), 1, 1.0)
    assert c.n_tokens == 2 and c.ids == [77]


def test_sse_lines() -> None:
    lines = ['data: {"content": "a"}', "", 'data: {"error": {"code": 500, "message": "Compute error."}}', "data: [DONE]", 'data: {"x": 1}']
    objs = list(parse_sse_lines(iter(lines)))
    assert objs == [{"content": "a"}, {"error": {"code": 500, "message": "Compute error."}}]


def test_metrics_delta_and_positions() -> None:
    before = parse_metrics("llamacpp:spec_decode_num_draft_tokens_total 10\n"
                           'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 4\n')
    after = parse_metrics("# HELP x\nllamacpp:spec_decode_num_draft_tokens_total 25\n"
                          "llamacpp:spec_decode_num_accepted_tokens_total 9\n"
                          'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 9\n'
                          'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 3\n')
    delta = counter_delta(before, after)
    assert delta["spec_decode_num_draft_tokens_total"] == 15
    assert per_position(delta) == [5, 3]


PROFILE = """
[run]
max_tokens = 8
[[prompts]]
name = "p"
text = "hi"
[[arms]]
name = "base"
backend = "llamacpp-server"
model = "tiny:llama"
[[arms]]
name = "dflash"
backend = "llamacpp-dflash"
model = "tiny:llama"
n_max = [3, 7]
options = { draft_model = "tiny:llama-dflash", extra_args = ["--foo", "1"] }
[[arms]]
name = "mtp"
backend = "llamacpp-mtp"
model = "tiny:llama"
n_max = 2
"""


def test_profile_baselines_sweeps_and_args(server_registry: Any) -> None:
    prof = parse_profile(PROFILE, "t.toml", server_registry)
    arms = {a.name: a for a in prof.arms}
    assert arms["base"].is_baseline
    assert arms["dflash-nmax7"].baseline == "base" and arms["mtp"].baseline == "base"
    assert not LlamaServerBackend.is_speculative({"spec_type": "none"}, None)
    assert LlamaServerBackend.is_speculative({"spec_type": "ngram-mod"}, None)
    assert LlamaMtpBackend.is_speculative({}, None) and LlamaDFlashBackend.is_speculative({}, None)
    from lab.api import BackendContext

    backend = LlamaDFlashBackend(arms["dflash-nmax7"], BackendContext(prof.run, "", lambda _: None))
    backend.port = 1234
    args = backend.server_args("/m.gguf", "/d.gguf")
    assert args[args.index("--spec-type") + 1] == "draft-dflash"
    assert args[args.index("--spec-draft-n-max") + 1] == "7"
    assert args[args.index("-md") + 1] == "/d.gguf"
    assert args[-2:] == ["--foo", "1"]  # raw extra arguments last, unchanged
    assert "--metrics" in args and "--log-timestamps" in args


def _line(raw: str) -> logparse.AcceptedLine:
    acc = logparse.parse_accepted(logparse.split_line(raw))
    assert acc is not None
    return acc


class _Stream:
    """Feeds streamed chunks (one token each) through LiveSteps the way the
    backend does: feed, then poll once the token was emitted."""

    def __init__(self, live: LiveSteps) -> None:
        self.live = live
        self.prev = 0

    def token(self, draft_n: int, acc: int, server_ms: float) -> None:
        obj = _chunk(self.prev + 1, draft_n, acc, 0.0)
        obj["timings"]["predicted_ms"] = server_ms
        c = chunk_from(obj, self.prev, server_ms / 1000.0)
        self.prev = c.predicted_n
        self.live.feed(c)
        self.live.poll()


def _live() -> tuple[LiveSteps, list[StepEvent], _Stream]:
    events: list[StepEvent] = []
    live = LiveSteps(Cell("a", "p", 1), lambda ev: events.append(ev), StepTracker(0.0))  # type: ignore[arg-type]
    return live, events, _Stream(live)


def test_a_step_is_emitted_once_its_line_and_its_tokens_are_in() -> None:
    live, events, stream = _live()
    stream.token(0, 0, 0.0)  # the first token ends prompt processing
    # the log line comes before the step's tokens: the step waits for them
    live.on_accepted(_line("0.00.100.000 I slot update_slots: id  0 | task 1 | accepted  2/ 3 draft tokens"))
    assert events == []
    stream.token(3, 2, 40.0)
    stream.token(3, 2, 40.0)
    assert events == []  # two of its three tokens
    stream.token(3, 2, 40.0)
    assert [(e.index, e.drafted, e.accepted, e.landed) for e in events] == [(0, 3, 2, 3)]
    # the first step has no start mark in the log: the server's stream clock spans it
    assert events[0].step_s == pytest.approx(0.040) and events[0].clocks.step is Clock.SERVER_TIMINGS
    # the tokens come before the log line: the line emits the step
    stream.token(6, 2, 90.0)
    assert len(events) == 1
    live.on_accepted(_line("0.00.150.000 I slot update_slots: id  0 | task 1 | accepted  0/ 3 draft tokens"))
    assert [(e.index, e.drafted, e.accepted, e.landed) for e in events] == [(0, 3, 2, 3), (1, 3, 0, 1)]
    # between two steps the log clock spans one step
    assert events[1].step_s == pytest.approx(0.050) and events[1].clocks.step is Clock.SERVER_LOG
    # no draft or verify figure while the request runs: the server tells its
    # draft time only at the end
    assert all(e.draft_s is None and e.verify_s is None for e in events)
    assert all(e.clocks.draft is Clock.NONE and e.clocks.verify is Clock.NONE for e in events)
    assert events[1].measured == "step=server-log;draft=none;verify=none"
    assert live.finish() == events


def test_restore_checkpoint_line_and_its_replay_are_one_step() -> None:
    live, events, stream = _live()
    stream.token(0, 0, 0.0)
    live.on_accepted(_line("0.00.100.000 I slot update_slots: id  0 | task 1 | accepted  2/ 2 draft tokens"))
    for _ in range(3):
        stream.token(2, 2, 10.0)
    assert len(events) == 1
    live.on_accepted(_line(
        "0.00.130.000 I slot update_slots: id  0 | task 1 | accepted  0/ 2 draft tokens (restore checkpoint)"))
    stream.token(4, 2, 60.0)
    assert len(events) == 1  # the step's tokens are in, its replay line is not
    live.on_accepted(_line("0.00.150.000 I slot update_slots: id  0 | task 1 | accepted  1/ 1 draft tokens"))
    # the restore line holds the counts, the replay line ends the step:
    # 150 ms - 100 ms on the server's log clock
    assert [(e.index, e.drafted, e.accepted, e.landed) for e in events] == [(0, 2, 2, 3), (1, 2, 0, 1)]
    assert events[1].step_s == pytest.approx(0.050) and events[1].measured.startswith("step=server-log")
    assert len(live.finish()) == 2


def test_a_step_cut_by_the_token_budget_is_emitted_when_the_stream_ends() -> None:
    live, events, stream = _live()
    stream.token(0, 0, 0.0)
    live.on_accepted(_line("0.00.100.000 I slot update_slots: id  0 | task 1 | accepted  3/ 3 draft tokens"))
    stream.token(3, 3, 20.0)
    stream.token(3, 3, 20.0)  # n_predict reached: 2 of the step's 4 tokens
    assert events == []
    steps = live.finish()
    assert [(e.index, e.accepted, e.landed) for e in steps] == [(0, 3, 2)]
    assert events == steps


def test_a_restore_line_left_at_the_end_is_a_step_and_abandon_stops_emission() -> None:
    live, events, stream = _live()
    stream.token(0, 0, 0.0)
    live.on_accepted(_line(
        "0.00.100.000 I slot update_slots: id  0 | task 1 | accepted  1/ 3 draft tokens (restore checkpoint)"))
    assert [(e.drafted, e.accepted) for e in live.finish()] == [(3, 1)]
    other, other_events, other_stream = _live()
    other_stream.token(0, 0, 0.0)
    other.abandon()
    other.on_accepted(_line("0.00.100.000 I slot update_slots: id  0 | task 1 | accepted  0/ 3 draft tokens"))
    other_stream.token(3, 0, 5.0)
    assert other_events == [] and other.finish() == []


def test_live_steps_fed_from_two_threads_come_out_once_and_in_order() -> None:
    live, events, stream = _live()
    n = 200
    lines = [_line(f"0.00.{100 + i:03d}.000 I slot update_slots: id  0 | task 1 | accepted  1/ 2 draft tokens")
             for i in range(n)]

    def log_reader() -> None:
        for line in lines:
            live.on_accepted(line)

    reader = threading.Thread(target=log_reader)
    stream.token(0, 0, 0.0)
    reader.start()
    for i in range(n):
        stream.token(2 * (i + 1), i + 1, float(i))
        stream.token(2 * (i + 1), i + 1, float(i))
    reader.join()
    steps = live.finish()
    assert [e.index for e in events] == list(range(n))
    assert steps == events
    assert sum(e.accepted for e in events) == n and sum(e.landed for e in events) == 2 * n


def test_server_log_routes_request_lines_and_load_facts() -> None:
    log = ServerLog()
    log.on_line("0.00.001.000 I load_tensors:   CPU_Mapped model buffer size =    98.00 MiB")
    log.on_line("0.00.002.000 E alloc: failed to allocate buffer of size 1000 GiB")
    assert log.engine_bytes == 98 * 1024 * 1024 and len(log.load_oom) == 1
    seen: list[logparse.AcceptedLine] = []
    req = log.begin(seen.append)
    log.on_line("0.00.100.000 I slot update_slots: id  0 | task 5 | accepted  3/ 4 draft tokens")
    log.on_line("0.05.000.000 I spec common_specu: statistics     draft-simple: #calls(b,g,a) =    1     4     4, "
                "#gen drafts =      4, #acc drafts =     4, #gen tokens =     16, #acc tokens =    12, "
                "dur(b,g,a) = 1.000, 8.000, 0.100 ms")
    log.on_line("0.05.000.000 I slot print_timing: id  0 | task 5 |       total time =     300.00 ms /    48 tokens")
    assert [(a.accepted, a.drafted) for a in seen] == [(3, 4)]
    assert req.stats_seen.is_set() and req.ended.is_set() and "draft-simple" in req.stats
    log.end()
    log.on_line("0.06.000.000 I slot update_slots: id  0 | task 6 | accepted  1/ 4 draft tokens")
    assert len(seen) == 1  # no request in flight: nobody gets it


def test_draft_time_per_request_and_the_derived_split() -> None:
    def stats(calls: int, draft_ms: float) -> logparse.ImplStats:
        return logparse.ImplStats("draft-simple", 1, calls, calls, calls, calls, 4 * calls, 3 * calls, 1.0, draft_ms, 0.1)

    last: dict[str, logparse.ImplStats] = {}
    assert crosscheck.draft_time({"draft-simple": stats(10, 50.0)}, last) == (50.0, 10)
    # cumulative counters: the second request is the difference
    assert crosscheck.draft_time({"draft-simple": stats(14, 70.0)}, last) == (20.0, 4)
    assert crosscheck.draft_time({}, last) == (None, None)
    cell = Cell("a", "p", 1)
    steps = [StepEvent(cell, i, 4, 3, 4, None, None, s) for i, s in enumerate((0.010, 0.004))]
    split = crosscheck.step_split(steps, 20.0, 4)
    assert split["draft_s_mean"] == pytest.approx(0.005)
    # each step less the draft, never below zero: (0.005 + 0) / 2
    assert split["verify_s_mean"] == pytest.approx(0.0025)
    assert split["split_clocks"] == {"draft": "server-total/calls", "verify": "step-draft"}
    assert crosscheck.step_split(steps, None, None)["split_clocks"] == {"draft": "none", "verify": "none"}


def test_count_checks_catch_a_step_the_lab_lost() -> None:
    cell = Cell("a", "p", 1)
    steps = [StepEvent(cell, i, 4, a, a + 1, None, None, 0.01) for i, a in enumerate((4, 2, 0))]
    report = {"metrics_accepted_per_pos": [2, 2, 1, 1],
              "server_timings": {"predicted_n": 9, "draft_n": 12, "draft_n_accepted": 6}}
    delta = {"spec_decode_num_draft_tokens_total": 12.0, "spec_decode_num_accepted_tokens_total": 6.0,
             "spec_decode_num_drafts_total": 3.0}
    summary = logparse.RequestSummary(accepted=6, generated=12, mean_len=3.0)
    checks, surfaces, missing = crosscheck.cross_check(steps, report, delta, summary, True, 9)
    # timings, /metrics and the log summary are one counter of the server's slot: one check
    assert checks == {"steps_vs_slot_counters": True, "per_position_vs_metrics": True, "tokens_vs_timings": True}
    assert surfaces == {"timings": True, "metrics": True, "request_summary": True} and missing == []
    lost, surfaces, _ = crosscheck.cross_check(steps[:2], report, delta, summary, True, 9)
    assert lost["steps_vs_slot_counters"] is False and not any(surfaces.values())


def test_a_missing_source_is_listed_not_passed() -> None:
    cell = Cell("a", "p", 1)
    steps = [StepEvent(cell, 0, 4, 2, 3, None, None, 0.01)]
    # no /metrics delta, no log summary, no predicted_n: only the timings are read
    report = {"server_timings": {"draft_n": 4, "draft_n_accepted": 2}}
    checks, surfaces, missing = crosscheck.cross_check(steps, report, {}, None, True, 3)
    assert checks == {"steps_vs_slot_counters": True}
    assert surfaces == {"timings": True, "metrics": None, "request_summary": None}
    assert "slot counters via metrics" in missing and "slot counters via request_summary" in missing
    assert any("predicted_n" in m for m in missing)
    # the token count is the server's or nothing: never the lab's own
    assert "tokens_vs_timings" not in checks


def _report_row(arm: str, baseline: bool, rep: dict[str, Any]) -> dict[str, Any]:
    return {"arm": arm, "prompt": "p", "round": 1, "status": "ok", "backend": "llamacpp-server",
            "drafter": None, "is_baseline": baseline, "baseline_arm": None if baseline else "base",
            "tok_per_s": 100.0 if baseline else 120.0, "speedup": None if baseline else 1.2,
            "steps": None if baseline else 2, "drafted": None if baseline else 8,
            "accepted": None if baseline else 4, "acceptance_rate": None if baseline else 0.5,
            "mean_accepted_len": None if baseline else 3.0, "step_s": 0.01, "draft_s": None, "verify_s": None,
            "step_cost_tokens": None if baseline else 1.0, "max_yield": None if baseline else 5,
            "n_max": None if baseline else 4, "peak_mem_bytes": None, "identical_to_baseline": None,
            "first_divergence_char": None, "n_tokens": 6, "engine_report": rep}


def test_a_mismatching_log_reaches_the_report() -> None:
    """A server log whose summary contradicts the steps the lab took from
    it: the row's check fails, and report.md says so in Conditions and
    beside the verdict."""
    from lab.render.report import render_markdown

    log = ServerLog()
    seen: list[logparse.AcceptedLine] = []
    req = log.begin(seen.append)
    for line in (
        "0.00.100.000 I slot update_slots: id  0 | task 7 | accepted  3/ 4 draft tokens",
        "0.00.200.000 I slot update_slots: id  0 | task 7 | accepted  1/ 4 draft tokens",
        "0.00.300.000 I slot print_timing: id  0 | task 7 | draft acceptance = 0.62500 (    5 accepted /     8 "
        "generated), mean len =  3.50",
    ):
        log.on_line(line)
    assert not req.released.is_set()
    log.on_line("0.00.400.000 I slot      release: id  0 | task 7 | stop processing: n_tokens = 40, truncated = 0")
    assert req.released.is_set() and req.task_id == 7
    log.end()
    cell = Cell("spec", "p", 1)
    steps = [StepEvent(cell, i, a.drafted, a.accepted, a.accepted + 1, None, None, 0.01) for i, a in enumerate(seen)]
    report: dict[str, Any] = {"server_timings": {"predicted_n": 6, "predicted_per_second": 100.0,
                                                 "draft_n": 8, "draft_n_accepted": 5}}
    checks = crosscheck.fill_report(
        report, n_tokens=6, gen_s=0.06, speculative=True, steps=steps, tracker=StepTracker(0.0),
        logged_steps=len(seen), metrics_before={}, metrics_after={}, acc_per_pos=None, summary=req.summary,
        draft_ms=None, draft_calls=None)
    assert checks == {"steps_vs_slot_counters": False, "tokens_vs_timings": True}
    assert report["counts_match_server"] is False
    assert report["slot_counter_surfaces"] == {"timings": False, "metrics": None, "request_summary": False}

    base_rep: dict[str, Any] = {"checks": {"tokens_vs_timings": True}, "counts_match_server": True}
    data = {"profile": {"name": "x", "run": {"max_tokens": 6, "rounds": 1, "warmup": 0}},
            "results": [_report_row("base", True, base_rep), _report_row("spec", False, report)]}
    md = render_markdown(data)
    conditions = md.split("## Conditions")[1].split("## Detail")[0]
    assert "1 of 2 checked rows the server's own counts differ" in conditions
    assert "spec / p r1: failed steps_vs_slot_counters (slot counters via timings, request_summary)" in conditions
    assert "missing: slot counters via metrics" in conditions
    spec_line = next(ln for ln in md.split("## Detail")[1].splitlines() if ln.startswith("| spec |"))
    assert "counts differ from the server's (1 of 1 rounds)" in spec_line
    # a row the server agrees with carries no mark
    report["checks"] = {"steps_vs_slot_counters": True}
    assert "counts differ" not in render_markdown(data).split("## Detail")[1]
