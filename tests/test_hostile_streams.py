"""Servers that attack the lab's memory and time: gzip bombs on /metrics,
/health and /props, millions of /metrics lines, NaN counters, streams that
ping, drip or never stop, an empty first stop, timings the lab's clock
refutes, a /health that never finishes. Each run goes through the real
runner in a child process (its peak RSS read from the kernel) beside a
baseline arm that must still run, with report.md written.

The servers are the loopback fakes of tests/test_hostile_servers.py.
"""

from __future__ import annotations

import gzip
import json
import time
import zlib
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from tests.hostile_gen import contained_run
from tests.test_hostile_servers import FakeServer, Handler, chunk, good_stream, serving

MiB = 1 << 20


@pytest.fixture
def serve() -> Iterator[Callable[..., FakeServer]]:
    yield from serving()

# The child's own floor (Python, httpx, the plugins) is about 100 MiB; a bomb read whole is GiBs.
RSS_BOUND = 600 * MiB


@lru_cache(maxsize=1)
def gzip_bomb() -> bytes:
    """A GiB of zeros, gzip-compressed (about 1 MiB)."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"\0" * MiB
    return b"".join([z.compress(block) for _ in range(1024)]) + z.flush()


def bomb(h: Handler) -> None:
    data = gzip_bomb()
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Encoding", "gzip")
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


PROFILE = """
[run]
max_tokens = 16
rounds = 1
warmup = 0
probe = false
memory_interval_s = 0.05
[[prompts]]
name = "p"
text = "hi"
[[arms]]
name = "base"
backend = "fake"
options = {{ virtual_clock = true }}
[[arms]]
name = "hostile"
backend = "{backend}"
url = "{url}"
options = {{ health_timeout_s = 5, concurrency_timeout_s = 20, first_token_timeout_s = 3, idle_timeout_s = 1.5{more} }}
"""


def hostile_run(srv: FakeServer, tmp_path: Path, more: str = "",
                backend: str = "llamacpp-server") -> tuple[dict[str, Any], Any]:
    got = contained_run(PROFILE.format(url=srv.url, more=more, backend=backend), tmp_path, timeout=90)
    assert got.rc == 0, got.stderr
    rows = {r["arm"]: r for r in got.rows}
    assert rows["base"]["status"] == "ok"
    assert got.report_md
    assert got.rss_bytes < RSS_BOUND, got.rss_bytes
    return rows["hostile"], got


@pytest.mark.slow
@pytest.mark.parametrize("path", ["/metrics", "/health", "/props"])
def test_a_gzip_bomb_is_read_within_bounds(serve: Callable[..., FakeServer], tmp_path: Path, path: str) -> None:
    gzip_bomb()
    row, got = hostile_run(serve(good_stream(8), gets={path: bomb}), tmp_path)
    assert got.seconds < 60
    if path == "/metrics":  # an auxiliary read: the row stands without it
        assert row["status"] == "ok", row["detail"]
    else:
        assert row["status"] == "error", row


@pytest.mark.slow
def test_the_inflater_stops_a_bomb_at_its_cap() -> None:
    """The bound itself: the bomb inflates a piece at a time and is refused
    at the cap, never whole."""
    import httpx

    from lab.kit.server.client import read_capped

    data = gzip.compress(b"\0" * (64 * MiB))
    r = httpx.Response(200, headers={"Content-Encoding": "gzip"}, stream=httpx.ByteStream(data))
    with pytest.raises(httpx.DecodingError, match="past 1,048,576 bytes"):
        read_capped(r, MiB, "GET /metrics")


def test_another_content_encoding_is_refused() -> None:
    import httpx

    from lab.kit.server.client import read_capped

    r = httpx.Response(200, headers={"Content-Encoding": "br"}, stream=httpx.ByteStream(b"xx"))
    with pytest.raises(httpx.DecodingError, match="'br'"):
        read_capped(r, MiB, "GET /metrics")


def metrics_text(lines: int, nan: bool = False) -> Callable[[Handler], None]:
    def answer(h: Handler) -> None:
        body = "".join(f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} {i}\n'
                       for i in range(lines))
        body += "llamacpp:tokens_predicted_total " + ("NaN" if nan else "16") + "\n"
        data = body.encode()
        h.send_response(200)
        h.send_header("Content-Type", "text/plain")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)
    return answer


@pytest.mark.slow
def test_two_million_metrics_lines_cost_no_memory_and_no_results(serve: Callable[..., FakeServer],
                                                                   tmp_path: Path) -> None:
    row, got = hostile_run(serve(good_stream(8), gets={"/metrics": metrics_text(2_000_000)}), tmp_path)
    assert row["status"] == "ok", row["detail"]
    run_dir = next((tmp_path / "runs").iterdir())
    assert (run_dir / "results.json").stat().st_size < 2 * MiB


def test_a_nan_counter_is_dropped_with_a_note_and_the_row_kept() -> None:
    from lab_llamacpp_server.metrics import counter_delta, parse_metrics, per_position

    dropped: list[str] = []
    text = ('llamacpp:tokens_predicted_total NaN\nllamacpp:spec_decode_num_drafts_total 3\n'
            'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} nan\n'
            'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 1e308\n')
    got = parse_metrics(text, dropped)
    assert dropped == ["tokens_predicted_total", 'spec_decode_num_accepted_tokens_per_pos_total{position="0"}']
    assert got["spec_decode_num_drafts_total"] == 3
    # 1e308 - (-1e308) is inf: no count, not a crash
    assert per_position(counter_delta({'spec_decode_num_accepted_tokens_per_pos_total{position="1"}': -1e308}, got)) == []


@pytest.mark.slow
def test_a_nan_counter_from_a_server_keeps_the_row(serve: Callable[..., FakeServer], tmp_path: Path) -> None:
    row, _ = hostile_run(serve(good_stream(8), gets={"/metrics": metrics_text(2, nan=True)}), tmp_path)
    assert row["status"] == "ok", row["detail"]


# -- time: idle limits -----------------------------------------------------------------------


def pings_after_one(h: Handler) -> None:
    h.begin_stream()
    h.event(chunk(1))
    while h.send(": ping\n\n"):
        time.sleep(0.05)


def drip(h: Handler) -> None:
    h.begin_stream()
    h.event(chunk(1))
    payload = f"data: {json.dumps(chunk(2))}\n\n".encode()
    for _ in range(100_000):
        for b in payload:
            if not h.send(bytes([b])):
                return
            time.sleep(0.2)


def never_stops(h: Handler) -> None:
    h.begin_stream()
    h.event(chunk(1))
    while h.send(": keep\n\n"):
        time.sleep(0.1)


def silent(h: Handler) -> None:
    h.begin_stream()
    while not h.server.stopping.is_set():
        time.sleep(0.1)


@pytest.mark.parametrize("answer,words", [
    (pings_after_one, "idle_timeout_s"),
    (drip, "idle_timeout_s"),
    (never_stops, "idle_timeout_s"),
    (silent, "Timeout"),
])
@pytest.mark.slow
def test_a_stream_that_stalls_ends_at_its_idle_limit(serve: Callable[..., FakeServer], tmp_path: Path,
                                                     answer: Callable[[Handler], None], words: str) -> None:
    row, got = hostile_run(serve(answer), tmp_path)
    assert row["status"] == "error" and words in row["detail"], row["detail"]
    assert got.seconds < 30, got.seconds


def test_the_idle_limits_are_arm_options_with_documented_defaults() -> None:
    from lab_llamacpp_server.backend import LlamaServerBackend

    from lab.kit.server.sse import FIRST_EVENT_S, IDLE_S

    names = {o.name: o.default for o in LlamaServerBackend.options}
    # a minute each, as the arm's own generate deadline (lab.base.profile.Deadlines)
    assert names["first_token_timeout_s"] == FIRST_EVENT_S == 60
    assert names["idle_timeout_s"] == IDLE_S == 60
    doc = (Path(__file__).resolve().parents[1] / "docs" / "robustness.md").read_text()
    assert "first_token_timeout_s" in doc and "idle_timeout_s" in doc


def slowloris(h: Handler) -> None:
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", "100000")
    h.end_headers()
    for _ in range(100_000):
        if not h.send(b" "):
            return
        time.sleep(0.5)


def endless_chunked(h: Handler) -> None:
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.send_header("Transfer-Encoding", "chunked")
    h.end_headers()
    while h.send(b"1\r\n \r\n"):
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.parametrize("path", ["/health", "/props"])
@pytest.mark.parametrize("answer", [slowloris, endless_chunked])
def test_a_plain_request_that_never_finishes_is_cut_at_its_own_deadline(
        serve: Callable[..., FakeServer], tmp_path: Path, path: str, answer: Callable[[Handler], None]) -> None:
    row, got = hostile_run(serve(good_stream(8), gets={path: answer}), tmp_path)
    assert row["status"] == "error", row
    assert got.seconds < 60, got.seconds


# -- plausible rows ---------------------------------------------------------------------------


def empty_first_stop(h: Handler) -> None:
    h.begin_stream()
    h.event(chunk(0, content="", stop=True))


@pytest.mark.slow
def test_a_stream_that_stops_before_its_first_token_is_no_baseline(serve: Callable[..., FakeServer],
                                                                      tmp_path: Path) -> None:
    row, _ = hostile_run(serve(empty_first_stop), tmp_path)
    assert row["status"] == "error" and "ignore_eos" in row["detail"], row["detail"]


@pytest.mark.slow
@pytest.mark.parametrize("ms", [1e308, 1e12])
def test_server_timings_the_lab_clock_refutes_are_an_error_naming_both(serve: Callable[..., FakeServer],
                                                                        tmp_path: Path, ms: float) -> None:
    def answer(h: Handler) -> None:
        h.begin_stream()
        for i in range(1, 9):
            h.event(chunk(i, predicted_ms=ms))
        h.event(chunk(8, content="", stop=True, predicted_ms=ms))

    row, _ = hostile_run(serve(answer), tmp_path)
    assert row["status"] == "error", row
    assert "lab's clock" in row["detail"] and "the request was open" in row["detail"], row["detail"]


@pytest.mark.slow
def test_pinging_streams_at_concurrency_4_end_at_the_idle_limit(serve: Callable[..., FakeServer],
                                                               tmp_path: Path) -> None:
    row, got = hostile_run(serve(pings_after_one), tmp_path, more=", concurrency = 4")
    assert row["status"] == "error" and "idle_timeout_s" in row["detail"], row["detail"]
    assert got.seconds < 30, got.seconds
