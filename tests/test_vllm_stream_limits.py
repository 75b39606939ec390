"""A ``vllm`` arm attached to loopback servers that speak vLLM's OpenAI-style
stream and misbehave: tokens past ``max_tokens`` end the stream at that chunk,
usage and timings the lab's own figures refute are an error naming both, and
every plain request (/v1/models, /metrics) is cut at its own deadline and
byte bound. Each run goes through the real runner in a child process beside
a baseline arm that must still run, with report.md written.

The servers are the loopback fakes of tests/test_hostile_servers.py, routed
as vLLM routes them.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import pytest

from lab.base.events import now
from tests import test_hostile_streams as streams
from tests.test_hostile_servers import FakeServer, Handler, serving
from tests.test_hostile_streams import bomb, slowloris

PROMPT_IDS = [1, 2, 3]  # what the fake's /tokenize answers


class VllmHandler(Handler):
    def do_POST(self) -> None:  # http.server's name
        if self.path == "/v1/completions":
            self.path = "/completion"  # the fake's streamed route
        if "POST " + self.path in self.server.gets:
            self.server.gets["POST " + self.path](self)
            return
        super().do_POST()


def _not_here(h: Handler) -> None:
    h._json({"error": {"message": "not here"}}, 404)


def _models(h: Handler) -> None:
    h._json({"object": "list", "data": [{"id": "m", "object": "model"}]})


def _metrics(h: Handler) -> None:
    data = b"vllm:num_requests_running 0.0\n"
    h.send_response(200)
    h.send_header("Content-Type", "text/plain")
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


# a vLLM server has no /props (attach.detect reads llama-server there)
VLLM_GETS = {"/props": _not_here, "/v1/models": _models, "/metrics": _metrics}


@pytest.fixture
def serve() -> Iterator[Callable[..., FakeServer]]:
    servers = serving()
    start = next(servers)

    def start_vllm(completion: Callable[[Handler], None], gets: dict[str, Any] | None = None) -> FakeServer:
        srv = start(completion, gets={**VLLM_GETS, **(gets or {})})
        srv.RequestHandlerClass = VllmHandler
        return srv

    yield start_vllm
    next(servers, None)


def token(i: int) -> dict[str, Any]:
    return {"choices": [{"index": 0, "text": "a", "token_ids": [100 + i], "finish_reason": None}]}


def last(n: int, usage: dict[str, Any] | None = None, **metrics: Any) -> list[dict[str, Any]]:
    """The chunk that ends a vLLM stream and the usage chunk after it."""
    end = {"choices": [{"index": 0, "text": "", "token_ids": [], "finish_reason": "length"}]}
    tail: dict[str, Any] = {"choices": [], "usage": {"prompt_tokens": len(PROMPT_IDS), "completion_tokens": n,
                                                     **(usage or {})}}
    if metrics:
        tail["metrics"] = metrics
    return [end, tail]


def stream(n: int = 8, usage: dict[str, Any] | None = None, **metrics: Any) -> Callable[[Handler], None]:
    def answer(h: Handler) -> None:
        h.begin_stream()
        for i in range(n):
            h.event(token(i))
            time.sleep(0.005)
        for obj in last(n, usage, **metrics):
            h.event(obj)
        h.send("data: [DONE]\n\n")
    return answer


def hostile_run(srv: FakeServer, tmp_path: Path, more: str = "") -> tuple[dict[str, Any], Any]:
    return streams.hostile_run(srv, tmp_path, more, backend="vllm")


def flood_after_limit(h: Handler) -> None:
    """Max_tokens' 16 tokens, then one more every 50 ms for as long as the
    lab reads (an hour's stream deadline without the cut)."""
    h.begin_stream()
    i = 0
    while h.event(token(i)):
        i += 1
        if i >= 16:
            time.sleep(0.05)


def one_giant_chunk(h: Handler) -> None:
    h.begin_stream()
    h.event({"choices": [{"index": 0, "text": "a" * 100, "token_ids": list(range(100_000)), "finish_reason": None}]})
    while h.send(": ping\n\n"):
        time.sleep(0.05)


PAST_16 = "the server sent 17 tokens for max_tokens = 16; the stream was ended there"


@pytest.mark.slow
@pytest.mark.parametrize(("answer", "more", "words"), [
    (stream(8), "", None),
    (flood_after_limit, "", PAST_16),
    # the lead stream and its side stream: each is cut, neither holds the cell
    (flood_after_limit, ", concurrency = 2", PAST_16),
    (one_giant_chunk, "", "the server sent 100000 tokens for max_tokens = 16"),
    (stream(8, generation_time_ms=1e12, time_to_first_token_ms=5.0), "", "the request was open"),
    (stream(8, usage={"completion_tokens": 1000}), "", "usage.completion_tokens = 1000 for max_tokens = 16, but 8"),
])
def test_a_vllm_stream_ends_at_its_limit_and_its_figures_meet_the_lab_clock(
        serve: Callable[..., FakeServer], tmp_path: Path, answer: Callable[[Handler], None], more: str,
        words: str | None) -> None:
    row, got = hostile_run(serve(answer), tmp_path, more)
    if words is None:  # the fake is good enough for an ok row: what fails below fails for one thing
        assert row["status"] == "ok" and row["n_tokens"] == 8, row["detail"]
    else:
        assert row["status"] == "error" and words in row["detail"], row["detail"]
    assert got.seconds < 30, got.seconds


@pytest.mark.slow
@pytest.mark.parametrize(("path", "answer"), [("/v1/models", slowloris), ("/metrics", bomb),
                                              ("POST /tokenize", lambda h: h._json({"tokens": [1, None]}))])
def test_a_bad_plain_answer_to_a_vllm_arm_is_an_error_row_within_bounds(
        serve: Callable[..., FakeServer], tmp_path: Path, path: str, answer: Callable[[Handler], None]) -> None:
    row, got = hostile_run(serve(stream(8), gets={path: answer}), tmp_path)
    # /v1/models says the server is up, /metrics that it is vLLM, /tokenize what the prompt is
    assert row["status"] == "error", row
    assert "POST" not in path or "the server sent a token id None" in row["detail"], row["detail"]
    assert got.seconds < 40, got.seconds


# -- the stream reader itself, without a server -----------------------------------------------


def _consume(objs: Iterable[dict[str, Any]], limit: int = 16) -> Any:
    from lab_vllm.stream import consume

    return consume(objs, now(), lambda c: None, lambda: False, limit=limit)


def test_the_cut_comes_before_a_giant_chunk_is_parsed() -> None:
    from lab_vllm.stream import VllmStreamError

    seen: list[int] = []

    def objs() -> Iterator[dict[str, Any]]:
        for i in range(16):
            seen.append(i)
            yield token(i)
        seen.append(16)
        # an id no token can have: the cut names the count before any id is read
        yield {"choices": [{"text": "x", "token_ids": [-1] * 5}]}
        seen.append(17)
        yield token(17)

    with pytest.raises(VllmStreamError, match="sent 21 tokens for max_tokens = 16"):
        _consume(objs())
    assert seen[-1] == 16


@pytest.mark.parametrize(("metrics", "usage", "words"), [
    ({"generation_time_ms": 1e308}, {}, ["1e+305", "the request was open"]),
    ({"generation_time_ms": "fast"}, {}, ["no durations", "generation nan"]),
    ({"time_to_first_token_ms": -4.0}, {}, ["no durations", "prompt -0.004"]),
    ({}, {"completion_tokens": 1e12}, ["usage.completion_tokens = 1000000000000.0", "not a count"]),
    ({}, {"prompt_tokens": 5000}, ["usage.prompt_tokens = 5000", "the lab sent 3 prompt tokens"]),
    ({"speculative_decoding": {"per_step_drafted": [4] * 100_000, "per_step_accepted": [0] * 100_000}}, {},
     ["holds 100000 steps", "for 8 tokens"]),
    ({"speculative_decoding": {"per_step_drafted": [4, "4"], "per_step_accepted": [1, 1]}}, {},
     ["holds 2 steps", "'4'"]),
])
def test_usage_and_timings_the_lab_refutes_name_both_figures(metrics: dict[str, Any], usage: dict[str, Any],
                                                             words: list[str]) -> None:
    from lab_vllm.stream import VllmStreamError, check_claims

    streamed = _consume([token(i) for i in range(8)] + last(8, usage, **metrics))
    with pytest.raises(VllmStreamError) as err:
        check_claims(streamed, len(PROMPT_IDS), 16)
    assert all(w in str(err.value) for w in words), str(err.value)


def test_plausible_usage_and_timings_pass() -> None:
    from lab_vllm.stream import check_claims

    streamed = _consume([token(i) for i in range(8)] + last(8, generation_time_ms=0.5, time_to_first_token_ms=0.1))
    check_claims(streamed, len(PROMPT_IDS), 16)
    assert len(streamed.ids) == 8 and streamed.end_t is not None
