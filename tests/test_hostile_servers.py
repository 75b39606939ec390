"""A ``url`` arm against servers that misbehave: every arm ends, within its
bounds, and a row is ``ok`` only when its figures are possible.

Each server here is a small Python HTTP server on 127.0.0.1 that speaks
just enough of llama-server (/health, /props, /tokenize, /completion) to be
attached to, then does one hostile thing. The test starts and stops it;
nothing it does can outlive the test (every endless answer also ends when
the test stops the server).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from lab.base.events import now
from lab.kit.server import attach

Completion = Callable[["Handler"], None]


class Handler(BaseHTTPRequestHandler):
    server: FakeServer  # type: ignore[assignment]

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _json(self, obj: Any, status: int = 200) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # http.server's name
        if self.path in self.server.gets:
            self.server.gets[self.path](self)
        elif self.path == "/health":
            self._json({"status": "ok"})
        elif self.path == "/props":
            self._json({"build_info": self.server.build_info, "default_generation_settings": {}, "total_slots": 1})
        else:
            self._json({"error": {"message": "not here"}}, 404)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path == "/tokenize":
            self._json({"tokens": [1, 2, 3]})
        elif self.path == "/apply-template":
            self._json({"prompt": "hi"})
        elif self.path == "/completion":
            self.server.asked.append(body)
            self.server.completion(self)
        else:
            self._json({"error": {"message": "not here"}}, 404)

    # -- what a /completion answer is made of -----------------------------------------------
    def begin_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()

    def send(self, raw: bytes | str) -> bool:
        """Write and flush; False once the client went away or the test ended."""
        if self.server.stopping.is_set():
            return False
        try:
            self.wfile.write(raw if isinstance(raw, bytes) else raw.encode())
            self.wfile.flush()
            return True
        except OSError:
            return False

    def event(self, obj: dict[str, Any]) -> bool:
        return self.send(f"data: {json.dumps(obj)}\n\n")


def chunk(n: int, *, content: str = "a", stop: bool = False, **timings: Any) -> dict[str, Any]:
    """A /completion chunk after ``n`` tokens, its timings as llama-server
    sends them with timings_per_token (overridable)."""
    t = {"predicted_n": n, "predicted_ms": 2.0 * n, "prompt_n": 3, "prompt_ms": 1.0, **timings}
    obj: dict[str, Any] = {"content": content, "tokens": [] if stop else [100 + n], "stop": stop, "timings": t}
    if stop:
        obj["tokens_evaluated"] = 3
    return obj


def good_stream(n: int = 8) -> Completion:
    def answer(h: Handler) -> None:
        h.begin_stream()
        for i in range(1, n + 1):
            h.event(chunk(i))
        h.event(chunk(n, content="", stop=True))
    return answer


class FakeServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, completion: Completion, build_info: str = "b1-fake",
                 gets: dict[str, Completion] | None = None) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.completion = completion
        self.build_info = build_info
        # paths whose GET does something hostile instead
        self.gets = dict(gets or {})
        self.asked: list[dict[str, Any]] = []
        self.stopping = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def serve() -> Iterator[Callable[..., FakeServer]]:
    yield from serving()


def serving() -> Iterator[Callable[..., FakeServer]]:
    """Start fake servers on loopback; every one is stopped when this ends."""
    started: list[tuple[FakeServer, threading.Thread]] = []

    def start(completion: Completion, **kw: Any) -> FakeServer:
        srv = FakeServer(completion, **kw)
        t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        t.start()
        started.append((srv, t))
        return srv

    yield start
    for srv, t in started:
        srv.stopping.set()
        srv.shutdown()
        srv.server_close()
        t.join(timeout=5)


def _registry() -> Any:
    import lab_llamacpp_server

    from lab.registry import load_registry

    reg = load_registry()
    if "llamacpp-server" not in reg.backends:
        reg = load_registry([lab_llamacpp_server.plugin])
    return reg


def _profile(url: str, options: str = "", arm: str = "", timeout_s: float = 2) -> str:
    return f"""
[run]
max_tokens = 16
rounds = 1
warmup = 0
probe = false
[[prompts]]
name = "p"
text = "hi"
[[arms]]
name = "hostile"
backend = "llamacpp-server"
url = "{url}"
{arm}
options = {{ health_timeout_s = 5, concurrency_timeout_s = {timeout_s}{options} }}
"""


def run_against(srv: FakeServer, tmp_path: Path, options: str = "", arm: str = "",
                timeout_s: float = 2) -> tuple[dict[str, Any], Path, float]:
    """One arm x one prompt against ``srv``: its row, its run directory and
    the seconds the run took."""
    from lab.profile.load import parse_profile
    from lab.render.report import ReportWriter
    from lab.runner import Runner
    from lab.store import RunStore

    reg = _registry()
    profile = parse_profile(_profile(srv.url, options, arm, timeout_s), str(tmp_path / "p.toml"), reg)
    store = RunStore(profile, tmp_path / "runs")
    t0 = time.monotonic()
    rows = Runner(profile, registry=reg, store=store, listeners=[ReportWriter(store)]).run()
    took = time.monotonic() - t0
    assert len(rows) == 1
    return dict(rows[0]), store.path, took


@pytest.mark.slow
def test_a_well_behaved_fake_server_gives_an_ok_row(serve: Callable[..., FakeServer], tmp_path: Path) -> None:
    """The fake itself is good enough for an ok row: what fails below fails
    for the one thing each server does wrong."""
    row, _, took = run_against(serve(good_stream(8)), tmp_path)
    assert row["status"] == "ok", row["detail"]
    assert row["n_tokens"] == 8 and took < 10


# -- 1. every read bounded in time and bytes ----------------------------------------------------


@pytest.mark.slow
def test_sse_comments_do_not_keep_an_arm_alive(serve: Callable[..., FakeServer], tmp_path: Path) -> None:
    def pings(h: Handler) -> None:
        h.begin_stream()
        h.event(chunk(1))
        for _ in range(200):  # 20 s at most, far past the arm's 2 s deadline
            if not h.send(": ping\n\n"):
                return
            time.sleep(0.1)

    row, _, took = run_against(serve(pings), tmp_path)
    assert row["status"] == "error"
    assert "concurrency_timeout_s" in row["detail"], row["detail"]
    assert took < 8


@pytest.mark.slow
def test_a_data_line_that_never_ends_is_cut_at_the_line_cap(serve: Callable[..., FakeServer], tmp_path: Path) -> None:
    def endless(h: Handler) -> None:
        h.begin_stream()
        h.send("data: ")
        for _ in range(2000):
            if not h.send(b"x" * 65536):
                return
            time.sleep(0.001)

    row, _, took = run_against(serve(endless), tmp_path, timeout_s=60)
    assert row["status"] == "error"
    assert "line of the stream went past" in row["detail"], row["detail"]
    assert took < 10


@pytest.mark.slow
def test_a_huge_build_info_is_capped_in_the_log_and_results(serve: Callable[..., FakeServer], tmp_path: Path) -> None:
    row, run_dir, _ = run_against(serve(good_stream(4), build_info="B" * 20_000_000), tmp_path)
    assert row["status"] == "ok", row["detail"]
    assert (run_dir / "lab.log").stat().st_size < 100_000
    assert (run_dir / "results.json").stat().st_size < 1_000_000
    assert "more characters" in (run_dir / "lab.log").read_text()


def test_bounded_lines_checks_its_deadline_on_every_piece() -> None:
    from lab.kit.server.sse import StreamLimit, bounded_lines, parse_sse_lines

    def comments() -> Iterator[bytes]:
        while True:  # a server that only ever pings
            yield b": ping\n\n"
            time.sleep(0.01)

    t0 = time.monotonic()
    with pytest.raises(StreamLimit, match="deadline"):
        list(parse_sse_lines(bounded_lines(comments(), deadline=now() + 0.3)))
    assert time.monotonic() - t0 < 2


def test_bounded_lines_caps_a_line_and_the_body() -> None:
    from lab.kit.server.sse import StreamLimit, bounded_lines

    with pytest.raises(StreamLimit, match="line"):
        list(bounded_lines(iter([b"data: " + b"x" * 1000] * 10), max_line=4096))
    with pytest.raises(StreamLimit, match="bytes"):
        list(bounded_lines(iter([b"data: {}\n"] * 1000), max_body=2048))
    # within bounds: lines as sent, \r\n or \n, the last one without its newline
    assert list(bounded_lines(iter([b"a\r\nb", b"c\nd"]))) == ["a", "bc", "d"]


def test_a_stop_request_is_heard_between_comments() -> None:
    from lab.api import Cancelled
    from lab.kit.server.sse import bounded_lines, parse_sse_lines

    asked = [0]

    def stop() -> bool:
        asked[0] += 1
        return asked[0] > 3

    with pytest.raises(Cancelled):
        list(parse_sse_lines(bounded_lines(iter([b": ping\n"] * 100), stop=stop)))


# -- 2. a counter that is no count --------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("predicted", [50_000_000, 1e12, -5, "7", 2.5])
def test_a_giant_or_malformed_predicted_n_is_an_error_at_once(serve: Callable[..., FakeServer], tmp_path: Path,
                                                              predicted: Any) -> None:
    def giant(h: Handler) -> None:
        h.begin_stream()
        h.event(chunk(1))
        h.event({"content": "b", "tokens": [7], "stop": False, "timings": {"predicted_n": predicted, "predicted_ms": 5.0}})
        h.event(chunk(2, content="", stop=True))

    row, _, took = run_against(serve(giant), tmp_path)
    assert row["status"] == "error" and row["n_tokens"] is None
    assert "predicted_n" in row["detail"], row["detail"]
    assert took < 8


def test_chunk_from_refuses_a_jump_without_allocating_it() -> None:
    from lab_llamacpp_server.stream import MAX_CHUNK_TOKENS, StreamError, chunk_from

    with pytest.raises(StreamError, match="jumped"):
        chunk_from({"timings": {"predicted_n": MAX_CHUNK_TOKENS + 10}}, 0, 0.0)
    with pytest.raises(StreamError, match="not a count"):
        chunk_from({"timings": {"predicted_n": 10**12}}, 0, 0.0)
    assert chunk_from({"timings": {"predicted_n": MAX_CHUNK_TOKENS}}, 0, 0.0).n_tokens == MAX_CHUNK_TOKENS


# -- 3. impossible figures are errors, naming the figure -------------------------------------------


def _spec_stream(steps: list[tuple[int, int, int]], **timings: Any) -> Completion:
    """A speculative stream: per chunk (predicted_n, draft_n, draft_n_accepted)."""
    def answer(h: Handler) -> None:
        h.begin_stream()
        for n, d, a in steps:
            h.event(chunk(n, draft_n=d, draft_n_accepted=a, **timings))
        n, d, a = steps[-1]
        h.event(chunk(n, content="", stop=True, draft_n=d, draft_n_accepted=a, **timings))
    return answer


SPEC = "n_max = 4"
SPEC_OPTIONS = ', spec_type = "ngram-simple"'


@pytest.mark.slow
@pytest.mark.parametrize(("name", "stream", "figure"), [
    ("accepted > drafted", _spec_stream([(1, 0, 0), (2, 2, 5), (3, 2, 5)]), "draft_n_accepted = 5 is more than"),
    ("drafted 1e15", _spec_stream([(1, 0, 0), (2, 10**15, 1), (3, 10**15, 1)]), "draft_n"),
    ("predicted_n down", _spec_stream([(1, 0, 0), (5, 0, 0), (3, 0, 0)]), "predicted_n went down"),
    ("predicted_ms 1e-300", _spec_stream([(1, 0, 0), (2, 0, 0), (3, 0, 0)], predicted_ms=1e-300), "gen_s"),
])
def test_impossible_figures_make_an_error_row(serve: Callable[..., FakeServer], tmp_path: Path,
                                              name: str, stream: Completion, figure: str) -> None:
    row, _, took = run_against(serve(stream), tmp_path, SPEC_OPTIONS, SPEC)
    assert row["status"] == "error", (name, row["detail"])
    assert figure in row["detail"], (name, row["detail"])
    assert took < 8


@pytest.mark.slow
def test_more_tokens_than_asked_is_an_error_row(serve: Callable[..., FakeServer], tmp_path: Path) -> None:
    def flood(h: Handler) -> None:
        h.begin_stream()
        for n in range(2000, 200_001, 2000):  # 200,000 tokens for max_tokens = 16
            if not h.event({"content": "x", "stop": False, "timings": {"predicted_n": n, "predicted_ms": n * 1.0}}):
                return
        h.event(chunk(200_000, content="", stop=True))

    srv = serve(flood)
    row, _, took = run_against(srv, tmp_path)
    assert srv.asked and srv.asked[0]["n_predict"] == 16
    assert row["status"] == "error"
    # ended at the first chunk past the limit, not read to its end
    assert "2000 tokens for n_predict = 16" in row["detail"], row["detail"]
    assert took < 10


def test_the_plausibility_check_holds_in_process_rows_too(tmp_path: Path) -> None:
    """build_result, which every backend's rows go through, applies it."""
    from lab.base.cells import Cell
    from lab.base.events import StepEvent
    from lab.profile.load import parse_profile
    from lab.rows.build import build_result

    profile = parse_profile(_profile("http://127.0.0.1:1", SPEC_OPTIONS, SPEC), str(tmp_path / "p.toml"), _registry())
    arm = profile.arms[0]
    cell = Cell(arm.name, "p", 1)
    fine = [StepEvent(cell, 0, 4, 2, 3, None, None, 0.01)]
    ok = build_result(arm=arm, prompt="p", round=1, status="ok", steps=fine, n_tokens=8, gen_s=0.1,
                      text="x" * 8, max_tokens=16)
    assert ok["status"] == "ok" and ok["accepted"] == 2
    wrong = [StepEvent(cell, 0, 4, 5, 6, None, None, 0.01)]
    row = build_result(arm=arm, prompt="p", round=1, status="ok", steps=wrong, n_tokens=8, gen_s=0.1,
                       text="x" * 8, max_tokens=16, detail="engine said so")
    assert row["status"] == "error" and row["tok_per_s"] is None
    assert row["detail"] == "impossible figure: step 0: accepted 5 > drafted 4; engine said so"
    over = build_result(arm=arm, prompt="p", round=1, status="ok", n_tokens=20, gen_s=0.1, max_tokens=16)
    assert over["status"] == "error" and "n_tokens = 20 for max_tokens = 16" in over["detail"]
    allowed = build_result(arm=arm, prompt="p", round=1, status="ok", n_tokens=20, gen_s=0.1, max_tokens=16, overshoot=4)
    assert allowed["status"] == "ok"


# -- 4. a stream that did not finish -----------------------------------------------------------


def _closed_early(h: Handler) -> None:
    h.begin_stream()
    h.event(chunk(1))


def _empty(h: Handler) -> None:
    h.send_response(200)
    h.send_header("Content-Length", "0")
    h.end_headers()


def _redirect(h: Handler) -> None:
    h.send_response(307)
    h.send_header("Location", "http://127.0.0.1:9/completion")
    h.send_header("Content-Length", "0")
    h.end_headers()


@pytest.mark.slow
@pytest.mark.parametrize(("answer", "why"), [
    (_closed_early, "ended before its stop chunk, after 1 tokens"),
    (_empty, "ended before its stop chunk, after 0 tokens"),
    (_redirect, "HTTP 307: a redirect to http://127.0.0.1:9/completion, not followed"),
])
def test_an_unfinished_stream_is_no_ok_row(serve: Callable[..., FakeServer], tmp_path: Path,
                                           answer: Completion, why: str) -> None:
    row, _, _ = run_against(serve(answer), tmp_path)
    assert row["status"] == "error" and row["n_tokens"] is None
    assert why in row["detail"], row["detail"]


# -- 5. a server's words reach the report escaped ------------------------------------------------


@pytest.mark.slow
def test_server_error_text_is_escaped_in_report_and_log(serve: Callable[..., FakeServer], tmp_path: Path) -> None:
    evil = "boom \x1b[2J\x1b]52;c;ZXZpbA==\x07 " + "y" * 5000

    def fails(h: Handler) -> None:
        h._json({"error": {"message": evil}}, 500)

    row, run_dir, _ = run_against(serve(fails), tmp_path)
    assert row["status"] == "error" and "HTTP 500: boom" in row["detail"]
    assert len(row["detail"]) < 2000  # the server's words, capped
    for name in ("report.md", "lab.log"):
        text = (run_dir / name).read_text()
        assert "\x1b" not in text and "\x07" not in text, name
    assert "boom \\x1b[2J\\x1b]52;" in (run_dir / "report.md").read_text()


# -- 6. a key no request can carry --------------------------------------------------------------


def test_a_key_holding_a_newline_is_refused_at_check_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lab.profile.load import ProfileError, check_profile

    secret = "s3cr3t-value"
    monkeypatch.setenv("LAB_HOSTILE_KEY", secret + "\n")
    path = tmp_path / "p.toml"
    path.write_text(_profile("http://127.0.0.1:1", arm='api_key_env = "LAB_HOSTILE_KEY"'))
    t0 = time.monotonic()
    with pytest.raises(ProfileError) as err:
        check_profile(path, _registry())
    assert time.monotonic() - t0 < 5
    assert "LAB_HOSTILE_KEY" in str(err.value) and "newline" in str(err.value)
    assert secret not in str(err.value)


def test_a_key_holding_a_newline_fails_the_arm_at_once(serve: Callable[..., FakeServer], tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAB_HOSTILE_KEY", "abc\ndef")
    row, run_dir, took = run_against(serve(good_stream(4)), tmp_path, arm='api_key_env = "LAB_HOSTILE_KEY"')
    assert row["status"] == "error" and took < 5
    assert "LAB_HOSTILE_KEY" in row["detail"] and "newline" in row["detail"], row["detail"]
    log = run_dir / "lab.log"
    assert "abc" not in row["detail"] and (not log.exists() or "abc" not in log.read_text())
    with pytest.raises(attach.AttachError, match="newline"):
        attach.auth_headers("K", {"K": "a\r\nb"})


# -- 7. a url no arm could attach to is refused by lab check ----------------------------------


@pytest.mark.parametrize("url,words", [
    ("file:///etc/passwd", "http:// or https://"),
    ("http://192.0.2.7:8080", "not a loopback address"),
    ("http://user:pw@127.0.0.1:8080", "credentials"),
    ("http://127.0.0.1:8080/v1/admin", "without a path"),
])
def test_lab_check_refuses_a_url_the_arm_would_refuse(tmp_path: Path, url: str, words: str) -> None:
    from lab.profile.load import ProfileError, check_profile

    path = tmp_path / "p.toml"
    path.write_text(_profile(url))
    with pytest.raises(ProfileError) as err:
        check_profile(path, _registry())
    assert "url" in str(err.value) and words in str(err.value), err.value
    assert "pw" not in str(err.value).replace("password", "")


def test_lab_check_takes_a_remote_url_the_arm_allows(tmp_path: Path) -> None:
    from lab.profile.load import check_profile

    path = tmp_path / "p.toml"
    path.write_text(_profile("http://192.0.2.7:8080", options=", allow_remote = true"))
    check_profile(path, _registry())
