"""The vLLM backend: its command line, its counters and stream read without
a server, then a real vLLM server (the CPU build) on SmolLM2: an ngram arm
end to end with counts equal to vLLM's counters, and no vLLM process left
after the run, a Ctrl-C or a kill -9 of the lab.

vLLM starts in one to several minutes on two cores, so the real-server tests
start as few servers as they can: two for the run, one attached by URL (one
and two streams), one each for the interrupts (stopped while loading). The interpreter with vLLM is the lab's
own unless LAB_VLLM_PYTHON names another.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

lab_vllm = pytest.importorskip("lab_vllm", reason="the lab_vllm plugin is not installed here (pip install -e .)")

from lab_vllm import metrics  # noqa: E402
from lab_vllm.command import server_args, speculative_config  # noqa: E402
from lab_vllm.stream import consume  # noqa: E402

from tests.needs import need_vllm  # noqa: E402

PLUGINS = str(Path(__file__).resolve().parents[1] / "plugins")
# one vLLM server at a time across workers (tests/conftest.py): each takes gigabytes
pytestmark = pytest.mark.xdist_group("vllm")

# -- no server ----------------------------------------------------------------------------------------


def test_speculative_config_from_the_profile() -> None:
    assert speculative_config({"spec_method": "none"}, 4, None) is None
    cfg = speculative_config({"spec_method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 4}, 5, None)
    assert cfg == {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_min": 2, "prompt_lookup_max": 4}
    cfg = speculative_config({"spec_method": "draft_model", "speculative_config": '{"draft_tensor_parallel_size": 1}'},
                             3, "/m/draft")
    assert cfg == {"method": "draft_model", "num_speculative_tokens": 3, "model": "/m/draft", "draft_tensor_parallel_size": 1}


def test_set_acceptance_goes_as_the_synthetic_sampler_with_the_labs_rates() -> None:
    cfg = speculative_config({"spec_method": "ngram"}, 3, None, (0.9, 0.81, 0.729))
    assert cfg is not None and cfg["rejection_sample_method"] == "synthetic"
    assert cfg["synthetic_acceptance_rates"] == [0.9, 0.81, 0.729]
    # never vLLM's own mean-length schedule, which means something else
    assert "synthetic_acceptance_length" not in cfg
    args = server_args({"spec_method": "ngram"}, model_dir="/m", served_name="a", port=1, n_max=3, draft_path=None,
                       n_ctx=512, concurrency=1, set_rates=(0.5, 0.25, 0.125))
    spec = json.loads(args[args.index("--speculative-config") + 1])
    assert spec["synthetic_acceptance_rates"] == [0.5, 0.25, 0.125]


def test_server_args_bind_loopback_and_pass_extra_args_last() -> None:
    args = server_args({"spec_method": "ngram", "extra_args": ["--seed", "7"]}, model_dir="/m", served_name="a",
                       port=1234, n_max=4, draft_path=None, n_ctx=512, concurrency=2)
    assert args[args.index("--host") + 1] == "127.0.0.1"
    assert args[args.index("--max-num-seqs") + 1] == "2"
    assert "--enforce-eager" in args
    assert json.loads(args[args.index("--speculative-config") + 1])["method"] == "ngram"
    assert args[args.index("--per-request-spec-decode-metrics") + 1] == "detailed"
    assert args[-2:] == ["--seed", "7"]
    base = server_args({}, model_dir="/m", served_name="a", port=1, n_max=None, draft_path=None, n_ctx=512, concurrency=1)
    assert "--speculative-config" not in base


METRICS = """
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
vllm:spec_decode_num_drafts_total{engine="0",model_name="a"} 5.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="a"} 1.7e9
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="a"} 20.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="a"} 7.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="a",position="0"} 4.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="a",position="1"} 3.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="a",position="1"} 1.0
vllm:num_requests_running{engine="0",model_name="a"} 0.0
"""


def test_metrics_sum_engines_and_keep_positions() -> None:
    m = metrics.parse_metrics(METRICS)
    assert m[metrics.DRAFTS] == 5 and m[metrics.DRAFT_TOKENS] == 20 and m[metrics.ACCEPTED] == 7
    assert not any(k.endswith("_created") for k in m)
    assert metrics.per_position(metrics.delta({}, m)) == [4, 4]


def test_stream_chunks_and_the_per_step_record() -> None:
    objs: list[dict[str, Any]] = [
        {"choices": [{"text": "Hel", "token_ids": [1]}]},
        {"choices": [{"text": "lo w", "token_ids": [2, 3, 4]}]},
        {"choices": [{"text": "orld", "token_ids": [5]}]},
        {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 5},
         "metrics": {"speculative_decoding": {"per_step_drafted": [3, 3], "per_step_accepted": [2, 0],
                                              "num_draft_tokens": 6, "num_accepted_draft_tokens": 2}}},
    ]
    seen: list[list[int]] = []
    out = consume(objs, 0.0, lambda c: seen.append(c.ids), lambda: False)
    assert out.text == "Hello world" and out.ids == [1, 2, 3, 4, 5]
    assert seen == [[1], [2, 3, 4], [5]]
    assert out.per_step() == [(3, 2), (3, 0)]
    assert out.usage["completion_tokens"] == 5


def test_every_step_gets_the_seconds_of_the_chunk_that_carried_it() -> None:
    from lab_vllm.steptiming import MEAN, ONE_PER_CHUNK, SHARED, time_steps

    # an ngram stream: the prompt's token, a step landing 3, an iteration that
    # drafted nothing (1 plain token, no step recorded), a step landing 1, then
    # a chunk that merged two iterations (a step landing 2 and a plain token)
    chunks = [(0.00, 1), (0.10, 3), (0.14, 1), (0.20, 1), (0.40, 3)]
    per_step = [(4, 2), (4, 0), (4, 1)]
    timed = time_steps(chunks, per_step)
    assert [t.landed for t in timed] == [3, 1, 2]
    assert [t.step_s for t in timed] == pytest.approx([0.10, 0.04, 0.10])
    assert [t.how for t in timed] == [ONE_PER_CHUNK, ONE_PER_CHUNK, SHARED]
    assert all(t.step_s > 0 for t in timed)
    # max_tokens cut the last step short: it lands what arrived
    cut = time_steps([(0.0, 1), (0.1, 3), (0.3, 2)], [(4, 2), (4, 3)])
    assert [(t.landed, t.how) for t in cut] == [(3, ONE_PER_CHUNK), (2, ONE_PER_CHUNK)]
    assert cut[1].step_s == pytest.approx(0.2)
    # a record that fits no chunk still gets a cost: the phase's mean per iteration
    lost = time_steps([(0.0, 1), (0.3, 3)], [(4, 2), (4, 2)])
    assert lost[1].how == MEAN and lost[1].step_s == pytest.approx(0.3) and lost[1].landed == 0


def test_an_ngram_row_with_unaligned_chunks_finds_its_baseline() -> None:
    """The row the runner builds from such a stream has a step cost and a
    verdict against its baseline (not "0.00/5" and "no baseline")."""
    from lab_vllm.steptiming import time_steps

    from lab.base.events import Cell, Clock, StepClocks, StepEvent
    from lab.base.profile import Arm
    from lab.rows.build import build_result

    chunks = [(0.00, 1), (0.10, 3), (0.14, 1), (0.20, 1), (0.40, 3)]
    per_step = [(4, 2), (4, 0), (4, 1)]
    cell = Cell("ngram", "p", 1)
    steps = [StepEvent(cell, i, d, a, t.landed, None, None, t.step_s, clocks=StepClocks(step=Clock.CLIENT))
             for i, ((d, a), t) in enumerate(zip(per_step, time_steps(chunks, per_step)))]
    arm = Arm(name="ngram", backend="vllm", model=None, drafter=None, n_max=4, options={}, drafter_options={},
              baseline="base", is_baseline=False, stack="vllm", group="ngram")
    base = {"arm": "base", "status": "ok", "tok_per_s": 12.0, "text": "x"}
    row = build_result(arm=arm, prompt="p", round=1, status="ok", steps=steps, n_tokens=9, gen_s=0.4,
                       text="x", baseline=base)
    assert row["step_cost_tokens"] and row["step_cost_tokens"] > 0
    assert "no baseline" not in row["verdict"], row["verdict"]


def test_shipped_vllm_profiles_check() -> None:
    from lab.profile.load import check_profile

    root = Path(lab_vllm.__file__).resolve().parent / "profiles"
    names = sorted(p.name for p in root.glob("*.toml"))
    assert names == ["concurrency-vllm.toml", "smollm2-vllm.toml", "writeup-vllm-cluster.toml"]
    for path in sorted(root.glob("*.toml")):
        profile = check_profile(str(path), _registry())
        assert all(a.backend == "vllm" for a in profile.arms), path.name
        # each speculative arm has its own stack's baseline, at its own concurrency
        assert all(a.baseline is not None for a in profile.arms if not a.is_baseline), path.name


# -- a real vLLM server ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vllm_ready() -> str:
    return need_vllm()


def _registry() -> Any:
    import lab_llamacpp_server

    from lab.registry import load_registry

    return load_registry([lab_llamacpp_server.plugin, lab_vllm.plugin])


def _profile(python: str, arms: str, max_tokens: int = 32, rounds: int = 1) -> str:
    return textwrap.dedent(f"""
        [run]
        max_tokens = {max_tokens}
        rounds = {rounds}
        warmup = 0
        n_ctx = 512
        [[prompts]]
        name = "code"
        text = "Write a Python class LRUCache with get and put methods, using a dict and a doubly linked list."
    """) + arms.replace("PYTHON", python)


ARMS = """
[[arms]]
name = "base"
backend = "vllm"
model = "embedded:smollm2"
options = { python = "PYTHON" }
[[arms]]
name = "ngram"
backend = "vllm"
model = "embedded:smollm2"
n_max = 4
options = { spec_method = "ngram", prompt_lookup_min = 2, prompt_lookup_max = 4, python = "PYTHON" }
"""


def _vllm_pids(root: int | None = None) -> list[int]:
    """vLLM server processes below ``root`` (default: this test process) and
    every process they started (the engine's spawned workers)."""
    import psutil

    out: set[int] = set()
    for p in psutil.Process(root or os.getpid()).children(recursive=True):
        try:
            if any("vllm.entrypoints" in part for part in p.cmdline()):
                out.add(p.pid)
                out.update(c.pid for c in p.children(recursive=True))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return sorted(out)


def _gone(pids: list[int], timeout: float) -> bool:
    import psutil

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive:
            return True
        time.sleep(0.2)
    return False


@pytest.fixture(scope="module")
def ngram_run(vllm_ready: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[Any], Path]]:
    from lab.profile.load import parse_profile
    from lab.render.report import ReportWriter
    from lab.runner import Runner
    from lab.store import RunStore

    tmp = tmp_path_factory.mktemp("vllm")
    registry = _registry()
    profile = parse_profile(_profile(vllm_ready, ARMS), str(tmp / "p.toml"), registry)
    store = RunStore(profile, tmp / "runs")
    rows = Runner(profile, registry, store, [ReportWriter()]).run()
    yield rows, store.path


@pytest.mark.engine
def test_ngram_arm_counts_equal_vllm_counters(ngram_run: tuple[list[Any], Path]) -> None:
    rows, run_dir = ngram_run
    by = {r["arm"]: r for r in rows}
    assert all(r["status"] == "ok" for r in rows), [(r["arm"], r["status"], r["detail"][:400]) for r in rows]
    spec = by["ngram"]
    rep = spec["engine_report"]
    assert spec["n_tokens"] == 32 and spec["baseline_arm"] == "base"
    assert spec["steps"] and spec["steps"] > 0
    d = rep["metrics_delta"]
    # what the lab reports is what vLLM counted, exactly
    assert spec["drafted"] == d[metrics.DRAFT_TOKENS]
    assert spec["accepted"] == d[metrics.ACCEPTED]
    assert spec["steps"] == d[metrics.DRAFTS]
    assert rep["counts_match_server"] is True, rep["checks"]
    assert rep["checks"]["per_position_vs_metrics"] is True
    # every step has a real cost, so the verdict is against the baseline
    assert spec["step_cost_tokens"] and spec["step_cost_tokens"] > 0, rep.get("step_timing")
    assert "no baseline" not in spec["verdict"], spec["verdict"]
    # greedy: the speculative output is the plain one, or the divergence is named
    assert spec["identical_to_baseline"] is not None
    assert spec["identical_to_baseline"] or spec["first_divergence_char"] is not None
    assert by["base"]["steps"] is None and by["base"]["tok_per_s"] > 0
    # both arms hashed the ids the server made of one prompt
    assert spec["prompt_sha256"] and spec["prompt_sha256"] == by["base"]["prompt_sha256"]
    assert spec["prompt_template"] == "vllm-server (ids)"
    assert (run_dir / "vllm-ngram.log").exists()
    assert "ngram" in (run_dir / "report.md").read_text()
    assert _vllm_pids() == []


NGRAM_ONLY = ARMS.split("[[arms]]")[2]


@pytest.mark.engine
def test_cold_ngram_rounds_draft_as_the_first(vllm_ready: str, tmp_path: Path) -> None:
    """ngram looks up the request's own tokens, so vLLM keeps nothing of it
    across requests but its prefix cache, which a cold round clears through
    the dev-mode route before its clock starts: every round drafts and
    accepts as round 1 did, with the same greedy text."""
    from lab_vllm.backend import VllmBackend

    from lab.profile.load import parse_profile
    from lab.runner import Runner
    from lab.store import RunStore

    assert VllmBackend.round_state({"spec_method": "ngram"}) == "reset"
    assert VllmBackend.round_state({"spec_method": "suffix"}) == "restart"
    registry = _registry()
    profile = parse_profile(_profile(vllm_ready, "[[arms]]" + NGRAM_ONLY, max_tokens=48, rounds=3),
                            str(tmp_path / "p.toml"), registry)
    store = RunStore(profile, tmp_path / "runs")
    rows = sorted(Runner(profile, registry, store, []).run(), key=lambda r: r["round"])
    assert [r["status"] for r in rows] == ["ok"] * 3, [r["detail"][:400] for r in rows]
    drafted = [r["drafted"] for r in rows]
    assert drafted[0] and drafted[0] > 0
    assert drafted[1:] == [drafted[0], drafted[0]]
    assert [r["accepted"] for r in rows[1:]] == [rows[0]["accepted"]] * 2
    # the reset ran between rounds, outside the cells' clocks, and is recorded
    assert [r["engine_report"].get("round_reset_s") is not None for r in rows] == [False, True, True]
    assert len({r["text"] for r in rows}) == 1 and all(r["warm"] is False for r in rows)
    assert "Successfully reset prefix cache" in (store.path / "vllm-ngram.log").read_text(errors="replace")
    assert _vllm_pids() == []


def _driver(run_dir: Path, profile: Path) -> subprocess.Popen[str]:
    """``lab run`` in a child process with the vLLM plugin loaded (also where
    its entry point is not installed), SIGINT at its default."""
    script = textwrap.dedent(f"""
        import sys
        import lab.registry as plugins
        import lab_vllm
        loader = plugins.load_registry
        plugins.load_registry = lambda extra=(): loader([lab_vllm.plugin, *extra])
        from lab.cli import main
        sys.exit(main(["run", {str(profile)!r}, "--out", {str(run_dir)!r}]))
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([PLUGINS, os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-c", script], env=env, text=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _started_vllm(lab: subprocess.Popen[str], timeout: float = 300.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and lab.poll() is None:
        pids = _vllm_pids(lab.pid)
        if pids:
            time.sleep(15.0)  # well into its start-up, its workers spawned
            return _vllm_pids(lab.pid)
        time.sleep(0.5)
    raise AssertionError(f"no vLLM process appeared (lab exit {lab.poll()})")


@pytest.mark.engine
@pytest.mark.parametrize("how", ["ctrl-c", "kill-9"])
def test_no_vllm_outlives_an_interrupted_lab(vllm_ready: str, tmp_path: Path, how: str) -> None:
    profile = tmp_path / "p.toml"
    profile.write_text(_profile(vllm_ready, ARMS.split("[[arms]]\nname = \"ngram\"")[0]))
    lab = _driver(tmp_path / "runs", profile)
    pids: list[int] = []
    try:
        pids = _started_vllm(lab)
        assert pids
        lab.send_signal(signal.SIGINT if how == "ctrl-c" else signal.SIGKILL)
        lab.wait(timeout=120)
        assert _gone(pids, timeout=60.0), f"vLLM outlived the lab ({how}): {pids}"
    finally:
        if lab.poll() is None:
            lab.kill()
            lab.wait()
        for pid in pids:  # never leave one behind, even when the test fails
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.engine
def test_attached_vllm_with_a_key_and_two_streams(vllm_ready: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A vLLM server the test starts (with an API key), attached by URL: one
    and two streams at once, every stream's steps summed equal to its
    counters."""
    from lab_vllm.models import hf_dir

    from lab.kit.server.process import ServerProcess, free_port
    from lab.profile.load import parse_profile
    from lab.runner import Runner
    from lab.store import RunStore

    port = free_port()
    argv = [vllm_ready, "-m", "vllm.entrypoints.openai.api_server", *server_args(
        {"spec_method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 4}, model_dir=str(hf_dir("embedded:smollm2", vllm_ready)),
        served_name="target", port=port, n_max=4, draft_path=None, n_ctx=512, concurrency=2), "--api-key", "sesame"]
    server = ServerProcess(argv, str(tmp_path / "vllm.log"), watch_group=True,
                           env={"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "HF_HUB_OFFLINE": "1"})
    server.start()
    try:
        monkeypatch.setenv("LAB_TEST_VLLM_KEY", "sesame")
        arms = f"""
[[arms]]
name = "ngram"
backend = "vllm"
url = "http://127.0.0.1:{port}"
api_key_env = "LAB_TEST_VLLM_KEY"
n_max = 4
concurrency = [1, 2]
options = {{ spec_method = "ngram", health_timeout_s = 1200 }}
"""
        registry = _registry()
        profile = parse_profile(_profile(vllm_ready, arms, max_tokens=24), str(tmp_path / "p.toml"), registry)
        rows = Runner(profile, registry, RunStore(profile, tmp_path / "runs")).run()
        assert [r["status"] for r in rows] == ["ok", "ok"], [r["detail"][:400] for r in rows]
        for level, row in zip((1, 2), rows):
            rep = row["engine_report"]
            assert row["server_url"] == f"http://127.0.0.1:{port}" and row["concurrency"] == level
            assert rep["concurrency"]["streams_ok"] == level
            assert rep["counts_match_server"] is True, rep["checks"]
            assert rep["checks"]["steps_vs_metrics"] is True
            assert rep["concurrency"]["drafted_total"] == rep["metrics_delta"][metrics.DRAFT_TOKENS]
        # the lab started nothing: the server is still the test's
        assert server.alive()
    finally:
        server.stop()


# -- the prompt's hash: of the ids the server made (a stand-in server, no vLLM needed) ------------------


class _StandIn:
    """Just enough of a vLLM server for one cell: /tokenize renders the
    messages its own way (not the lab's text), /v1/completions streams
    three tokens, /metrics has nothing."""

    def __init__(self) -> None:
        import http.server
        import threading

        outer = self
        self.tokenized: list[dict[str, Any]] = []
        self.prompts: list[Any] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, body: bytes, kind: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._send(b"", "text/plain")

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path == "/tokenize":
                    outer.tokenized.append(body)
                    text = body["messages"][-1]["content"] if "messages" in body else body["prompt"]
                    # the server's own rendering: a marker per turn, then the text's bytes
                    marks = [7] * len(body.get("messages", []))
                    self._send(json.dumps({"tokens": [*marks, *text.encode()]}).encode(), "application/json")
                    return
                outer.prompts.append(body["prompt"])
                chunks = [{"choices": [{"text": w, "token_ids": [i]}]} for i, w in enumerate(("a", " b", " c"), 1)]
                chunks.append({"choices": [], "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": 3}})
                sse = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
                self._send(sse.encode(), "text/event-stream")

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _cell_on(server: _StandIn, prompt: str, chat_template: bool) -> Any:
    from lab_vllm.backend import VllmBackend

    from lab.api import BackendContext, GenerationRequest
    from lab.base.cells import Cell
    from lab.base.profile import Arm, RunSettings
    from lab.kit.server.client import ServerClient

    arm = Arm(name="base", backend="vllm", model=None, drafter=None, n_max=None, options={}, drafter_options={},
              baseline=None, is_baseline=True, stack="vllm", group="base")
    backend = VllmBackend(arm, BackendContext(RunSettings(), "", lambda text: None))
    backend._client = ServerClient(server.url)
    request = GenerationRequest(cell=Cell("base", "p", 1), prompt=prompt, system=None, chat_template=chat_template,
                                max_tokens=3, temperature=0.0, seed=0, ignore_eos=True, n_max=None)
    try:
        return backend.generate(request, lambda event: None, lambda: False)
    finally:
        backend._client.close()


def test_a_vllm_row_hashes_the_prompt_ids_the_server_made_and_got() -> None:
    from lab.kit.prompting import ids_sha256

    server = _StandIn()
    try:
        gen = _cell_on(server, "hi", chat_template=True)
        other = _cell_on(server, "ho", chat_template=True)
        raw = _cell_on(server, "hi", chat_template=False)
    finally:
        server.close()
    # the server rendered the messages (the lab sent no text of its own) ...
    assert server.tokenized[0]["messages"] == [{"role": "user", "content": "hi"}]
    assert server.tokenized[2] == {"model": "base", "prompt": "hi"}
    # ... and the row's hash is of the very ids the completion request carried
    assert server.prompts[0] == [7, *b"hi"]
    assert gen.engine_report["prompt_sha256"] == ids_sha256(server.prompts[0])
    assert gen.engine_report["prompt_template"] == "vllm-server (ids)"
    assert other.engine_report["prompt_sha256"] != gen.engine_report["prompt_sha256"]
    assert raw.engine_report["prompt_template"] == "off (vllm ids)"
    assert raw.engine_report["prompt_sha256"] == ids_sha256(list(b"hi"))


def test_vllm_rows_with_hashes_read_as_hashed_prompts_in_the_report() -> None:
    from lab.render import conditions

    rows = [{"arm": a, "prompt": "p", "round": 1, "status": "ok", "prompt_sha256": "ab" * 32,
             "prompt_template": "vllm-server (ids)", "is_baseline": a == "base", "baseline_arm": None if a == "base"
             else "base"} for a in ("base", "ngram")]
    lines = conditions.prompt_lines(rows)
    assert lines == ["- p: every arm sent the same text (vllm-server (ids) template, sha256 abababababab)"], lines
