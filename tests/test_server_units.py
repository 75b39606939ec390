"""The llama-server plugin's parsing and bookkeeping, with no server: log
lines, stream grouping, /metrics text, option handling."""

from __future__ import annotations

from typing import Any

import pytest
from lab_llamacpp_server import logparse
from lab_llamacpp_server.backend import LlamaDFlashBackend, LlamaMtpBackend, LlamaServerBackend
from lab_llamacpp_server.binary import parse_build, parse_spec_types
from lab_llamacpp_server.metrics import counter_delta, parse_metrics, per_position
from lab_llamacpp_server.stream import StepTracker, chunk_from, parse_sse_lines

from lab.profiles import parse_profile


@pytest.fixture(scope="module")
def server_registry() -> Any:
    """The installed plugins, plus this one when its entry point is not
    installed yet (a checkout not re-installed since the plugin landed)."""
    import lab_llamacpp_server

    from lab.plugins import load_registry

    reg = load_registry()
    if "llamacpp-server" not in reg.backends:
        reg = load_registry([lab_llamacpp_server])
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


def test_restore_checkpoint_line_and_its_replay_are_one_step(server_registry: Any) -> None:
    from lab_llamacpp_server.stream import StreamStep

    from lab.api import BackendContext, GenerationRequest
    from lab.events import Cell

    prof = parse_profile(PROFILE, "t.toml", server_registry)
    arm = next(a for a in prof.arms if a.name == "mtp")
    backend = LlamaMtpBackend(arm, BackendContext(prof.run, "", lambda _: None))
    lines = [logparse.parse_accepted(logparse.split_line(raw)) for raw in (
        "0.00.100.000 I slot update_slots: id  0 | task 1 | accepted  2/ 2 draft tokens",
        "0.00.130.000 I slot update_slots: id  0 | task 1 | accepted  0/ 2 draft tokens (restore checkpoint)",
        "0.00.150.000 I slot update_slots: id  0 | task 1 | accepted  1/ 1 draft tokens",
    )]
    stream = [StreamStep(2, 2, 3, first_server_ms=10.0, prev_server_ms=0.0),
              StreamStep(2, 0, 1, after_step=True, first_server_ms=60.0, prev_server_ms=10.0)]
    req = GenerationRequest(Cell("mtp", "p", 1), "hi", None, False, 8, 0.0, 0, True, 2)
    report: dict[str, Any] = {}
    steps = backend._steps(stream, [ln for ln in lines if ln is not None], 0.004, req, report)
    assert [(s.drafted, s.accepted, s.landed) for s in steps] == [(2, 2, 3), (2, 0, 1)]
    assert steps[0].step_s == pytest.approx(0.010) and steps[0].measured.startswith("step=server-timings")
    # the replay line ends the step: 150 ms - 100 ms on the server's log clock
    assert steps[1].step_s == pytest.approx(0.050) and steps[1].measured.startswith("step=server-log")
    assert steps[1].verify_s == pytest.approx(0.046)
