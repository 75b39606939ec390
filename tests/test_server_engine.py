"""The llama-server backends against a real llama-server on tiny models:
steps, counts equal to the server's, greedy equivalence, OOM, crash, cancel,
and no server left behind on any path."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from lab_llamacpp_server.binary import ServerInfo, ServerNotFound, server_info

pytestmark = pytest.mark.engine

_INFO: ServerInfo | None
try:
    _INFO = server_info()
    _SKIP = ""
except ServerNotFound as exc:  # pragma: no cover - depends on the machine
    _INFO = None
    _SKIP = f"llama-server not found: {exc}"

needs_server = pytest.mark.skipif(_INFO is None, reason=_SKIP or "llama-server not found")


def _registry() -> Any:
    import lab_llamacpp_server

    from lab.registry import load_registry

    reg = load_registry()
    if "llamacpp-server" not in reg.backends:
        reg = load_registry([lab_llamacpp_server.plugin])
    return reg


@pytest.fixture(scope="module")
def registry() -> Any:
    return _registry()


def _server_pids() -> list[int]:
    """llama-server processes that are children of this test process (the
    only ones we may touch)."""
    import psutil

    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "llama-server" in child.name():
                out.append(child.pid)
        except psutil.NoSuchProcess:
            continue
    return out


def _gone(pid: int, timeout: float = 10.0) -> bool:
    import psutil

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


HEAD = """
[run]
max_tokens = {max_tokens}
rounds = {rounds}
warmup = 0
# these check the server's counts and life cycle; its probe has tests of its own (test_server_probe.py)
probe = false
n_ctx = 512
threads = 1
chat_template = true
[[prompts]]
name = "p"
text = "Write a short poem about the sea and the lighthouse keeper."
"""


def _run(registry: Any, tmp_path: Path, arms: str, max_tokens: int = 24, rounds: int = 1,
         listeners: tuple[Any, ...] = (), control: Any = None, prompts: str = "") -> tuple[list[dict[str, Any]], Path]:
    from lab.profile.load import parse_profile
    from lab.runner import Runner
    from lab.store import RunStore

    text = HEAD.format(max_tokens=max_tokens, rounds=rounds) + prompts + arms
    profile = parse_profile(text, str(tmp_path / "p.toml"), registry)
    store = RunStore(profile, tmp_path / "runs")
    runner = Runner(profile, registry, store, list(listeners), control)
    return runner.run(), store.path


SPEC_ARMS = """
[[arms]]
name = "llama-base"
backend = "llamacpp-server"
model = "tiny:llama"
[[arms]]
name = "llama-dflash"
backend = "llamacpp-dflash"
model = "tiny:llama"
n_max = 3
options = { draft_model = "tiny:llama-dflash" }
[[arms]]
name = "llama-self"
backend = "llamacpp-server"
model = "tiny:llama"
n_max = 4
options = { spec_type = "draft-simple", draft_model = "tiny:llama" }
[[arms]]
name = "glm-base"
backend = "llamacpp-server"
model = "tiny:glm4moe-mtp"
[[arms]]
name = "glm-mtp"
backend = "llamacpp-mtp"
model = "tiny:glm4moe-mtp"
n_max = 2
"""


@needs_server
def test_mtp_dflash_and_self_draft_steps_match_the_server(registry: Any, tmp_path: Path) -> None:
    from lab.base.events import Clock, StepEvent, TokenEvent

    tokens: dict[str, list[TokenEvent]] = {}
    steps: dict[str, list[StepEvent]] = {}

    def listen(ev: Any) -> None:
        if isinstance(ev, TokenEvent):
            tokens.setdefault(ev.cell.arm, []).append(ev)
        elif isinstance(ev, StepEvent):
            steps.setdefault(ev.cell.arm, []).append(ev)

    rows, run_dir = _run(registry, tmp_path, SPEC_ARMS, listeners=(listen,))
    by_arm = {r["arm"]: r for r in rows}
    assert all(r["status"] == "ok" for r in rows), [(r["arm"], r["status"], r["detail"][:300]) for r in rows]
    for arm in ("llama-dflash", "llama-self", "glm-mtp"):
        row = by_arm[arm]
        rep = row["engine_report"]
        assert row["steps"] and row["steps"] > 0, arm
        # the lab's counts are the server's, exactly: its per-request totals and /metrics
        assert (row["drafted"], row["accepted"]) == (rep["draft_n"], rep["draft_n_accepted"]), arm
        assert row["drafted"] == rep["metrics_delta"]["spec_decode_num_draft_tokens_total"], arm
        assert row["accepted"] == rep["metrics_delta"]["spec_decode_num_accepted_tokens_total"], arm
        assert row["steps"] == rep["metrics_delta"]["spec_decode_num_drafts_total"], arm
        assert rep["counts_match_server"] is True, (arm, rep["checks"])
        assert row["max_yield"] == row["n_max"] + 1
        assert row["n_tokens"] == 24 == rep["predicted_n"]
        # greedy output equals the baseline, or the divergence is reported
        assert row["identical_to_baseline"] is not None
        assert row["identical_to_baseline"] or row["first_divergence_char"] is not None
        # tokens marked as drafted are exactly the accepted ones
        drafted_marked = sum(len(t.ids) for t in tokens[arm] if t.from_draft)
        assert drafted_marked == row["accepted"], arm
        # steps were emitted live, counted per cell from 0; the server's draft
        # time is logged after them, so the request's split is in the report
        assert [s.index for s in steps[arm]] == list(range(row["steps"])), arm
        assert all(s.draft_s is None and s.clocks.draft is Clock.NONE for s in steps[arm]), arm
        assert rep["draft_s_mean"] is not None and rep["draft_s_mean"] > 0, arm
        assert rep["verify_s_mean"] is not None, arm
        assert rep["split_clocks"] == {"draft": "server-total/calls", "verify": "step-draft"}, arm
    # the model drafting for itself: every drafted token is accepted
    assert by_arm["llama-self"]["acceptance_rate"] == pytest.approx(1.0)
    assert by_arm["llama-self"]["identical_to_baseline"] is True
    # the lab's tok/s (streamed tokens it counted / the streamed generation
    # phase) agrees with the server's predicted_per_second; the lab's own
    # arrival clock is kept beside it
    for row in rows:
        rep = row["engine_report"]
        assert rep["tok_per_s_lab_over_server"] == pytest.approx(1.0, rel=0.01), row["arm"]
        assert rep["tok_per_s_client_clock"] and rep["tok_per_s_client_clock"] > 0
    assert by_arm["llama-base"]["peak_mem_bytes"] > 0
    # the server's buffer report: weights, KV, compute; the MTP context counted as draft
    assert by_arm["llama-base"]["engine_bytes"] > 0
    assert by_arm["glm-mtp"]["engine_report"]["engine_buffers"]["draft"] > 0
    assert by_arm["llama-base"]["engine_report"]["engine_buffers"]["draft"] == 0
    logs = sorted(p.name for p in run_dir.glob("llama-server-*.log"))
    assert "llama-server-glm-mtp.log" in logs
    assert _server_pids() == []


@needs_server
def test_ngram_mod_passes_raw_arguments(registry: Any, tmp_path: Path) -> None:
    arms = """
[[arms]]
name = "base"
backend = "llamacpp-server"
model = "tiny:llama"
[[arms]]
name = "ngram"
backend = "llamacpp-server"
model = "tiny:llama"
n_max = 8
options = { spec_type = "ngram-mod", extra_args = ["--spec-ngram-mod-n-match", "4", "--spec-ngram-mod-n-min", "1"] }
"""
    rows, run_dir = _run(registry, tmp_path, arms, max_tokens=48)
    ngram = next(r for r in rows if r["arm"] == "ngram")
    assert ngram["status"] == "ok", ngram["detail"]
    assert ngram["engine_report"]["counts_match_server"] in (True, None)
    log = (run_dir / "llama-server-ngram.log").read_text()
    assert "--spec-ngram-mod-n-match 4" in log.splitlines()[0]


@needs_server
def test_impossible_buffers_give_oom_and_the_run_goes_on(registry: Any, tmp_path: Path) -> None:
    arms = """
[[arms]]
name = "huge"
backend = "llamacpp-server"
model = "tiny:llama"
# an 8 GB KV cache in a 2 GB address space: the allocation fails at once
# (never let it succeed lazily: the kernel's OOM killer picks any process)
options = { ctx_size = 32000000, memory_limit_mb = 2048 }
[[arms]]
name = "after"
backend = "llamacpp-server"
model = "tiny:llama"
"""
    rows, _ = _run(registry, tmp_path, arms, max_tokens=8)
    by_arm = {r["arm"]: r for r in rows}
    assert by_arm["huge"]["status"] == "oom", by_arm["huge"]["detail"][:500]
    assert "engine log" in by_arm["huge"]["detail"]
    assert by_arm["after"]["status"] == "ok"
    assert _server_pids() == []


@needs_server
def test_kill_9_of_the_server_gives_crashed_and_the_next_arm_runs(registry: Any, tmp_path: Path) -> None:
    from lab.base.events import TokenEvent

    killed: list[int] = []

    def kill_first(ev: Any) -> None:
        if isinstance(ev, TokenEvent) and ev.cell.arm == "victim" and not killed:
            pids = _server_pids()
            assert len(pids) == 1
            os.kill(pids[0], signal.SIGKILL)
            killed.append(pids[0])

    arms = """
[[arms]]
name = "victim"
backend = "llamacpp-server"
model = "tiny:llama"
[[arms]]
name = "after"
backend = "llamacpp-server"
model = "tiny:llama"
"""
    # 400 tokens: the stream is still running when the first token lands
    rows, _ = _run(registry, tmp_path, arms, max_tokens=400, rounds=2, listeners=(kill_first,))
    victim = [r for r in rows if r["arm"] == "victim"]
    after = [r for r in rows if r["arm"] == "after"]
    assert killed
    assert [r["status"] for r in victim] == ["crashed", "crashed"], [r["detail"][:300] for r in victim]
    assert [r["status"] for r in after] == ["ok", "ok"]
    assert _gone(killed[0])
    assert _server_pids() == []


@needs_server
def test_cancel_leaves_no_server(registry: Any, tmp_path: Path) -> None:
    from lab.base.events import TokenEvent
    from lab.runner import RunControl

    control = RunControl()
    seen: list[int] = []

    def cancel_on_first_token(ev: Any) -> None:
        if isinstance(ev, TokenEvent) and not seen:
            seen.extend(_server_pids())
            control.cancel()

    arms = """
[[arms]]
name = "a"
backend = "llamacpp-server"
model = "tiny:llama"
[[arms]]
name = "b"
backend = "llamacpp-server"
model = "tiny:llama"
"""
    rows, _ = _run(registry, tmp_path, arms, max_tokens=64, listeners=(cancel_on_first_token,), control=control)
    assert seen, "no server was running when the first token landed"
    # the arm's events reach the lab in batches: the cell whose first token set
    # off the cancel may have finished its 64 tokens by then; every other is cancelled
    statuses = [r["status"] for r in rows]
    assert statuses.count("ok") <= 1 and set(statuses) <= {"ok", "cancelled"} and "cancelled" in statuses, statuses
    assert all(_gone(pid) for pid in seen)
    assert _server_pids() == []


@needs_server
def test_a_killed_lab_leaves_no_server(tmp_path: Path) -> None:
    """The lab process dies with SIGKILL (no atexit, no finally): the kernel
    still takes the server down with it."""
    script = textwrap.dedent(f"""
        import sys, time
        from lab.kit.server.process import ServerProcess, free_port
        from lab_llamacpp_server.binary import server_info
        from lab.kit import models
        from lab_llamacpp_server.models import register
        register(models.register_model)
        model = str(models.resolve("tiny:llama"))
        s = ServerProcess([server_info().path, "-m", model, "--port", str(free_port()), "-c", "256"], {str(tmp_path / "s.log")!r})
        s.start()
        print(s.pid, flush=True)
        time.sleep(120)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1] / "plugins"), os.environ.get("PYTHONPATH", "")])}
    lab = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert lab.stdout is not None
        pid = int(lab.stdout.readline().strip())
        assert not _gone(pid, timeout=0.5)
    finally:
        lab.kill()
        lab.wait()
    import psutil

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and psutil.pid_exists(pid):
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.1)
    survived = psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    if survived:  # never leave it behind, even when the test fails
        os.kill(pid, signal.SIGKILL)
    assert not survived, "llama-server outlived the lab process that started it"


@needs_server
def test_doctor_shows_build_and_spec_types() -> None:
    from lab.cli.doctor import run_checks

    check = next(c for c in run_checks() if c.name == "llama-server")
    assert check.ok
    assert "draft-mtp" in check.detail and "draft-dflash" in check.detail
    assert _INFO is not None and _INFO.build is not None and f"b{_INFO.build}" in check.detail


@needs_server
def test_a_server_count_mismatch_reaches_the_report(registry: Any, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A real server whose log miscounts one step (one drafted token more on
    a short step near the end, still a possible step): the lab's steps no longer add up to the server's
    own counters, and report.md shows it in Conditions and beside the row's
    verdict. (A step line lost whole makes the tokens landed impossible: that
    row is an error, lab.rows.plausible.)"""
    import dataclasses

    from lab_llamacpp_server import logparse

    parse = logparse.parse_accepted
    done = [False]

    def losing_one(line: logparse.LogLine) -> logparse.AcceptedLine | None:
        got = parse(line)
        if got is not None and not done[0] and got.drafted < 4:
            done[0] = True
            return dataclasses.replace(got, drafted=got.drafted + 1)
        return got

    from lab.render.report import ReportWriter

    monkeypatch.setattr(logparse, "parse_accepted", losing_one)
    monkeypatch.setenv("LAB_ARM_PROCESS", "shared")  # the miscount is patched into this process
    arms = """
[[arms]]
name = "llama-base"
backend = "llamacpp-server"
model = "tiny:llama"
[[arms]]
name = "llama-self"
backend = "llamacpp-server"
model = "tiny:llama"
n_max = 4
options = { spec_type = "draft-simple", draft_model = "tiny:llama" }
"""
    rows, run_dir = _run(registry, tmp_path, arms, listeners=(ReportWriter(),))
    spec = next(r for r in rows if r["arm"] == "llama-self")
    assert spec["status"] == "ok", spec["detail"][:300]
    rep = spec["engine_report"]
    assert rep["checks"]["steps_vs_slot_counters"] is False, rep["checks"]
    assert rep["counts_match_server"] is False
    # the three surfaces of the slot counter all disagree with the lab's steps
    assert rep["slot_counter_surfaces"] == {"timings": False, "metrics": False, "request_summary": False}
    assert rep["server_log_complete"] is True
    md = (run_dir / "report.md").read_text()
    assert "llama-self / p r1: failed steps_vs_slot_counters" in md.split("## Conditions")[1].split("## Detail")[0]
    spec_line = next(ln for ln in md.split("## Detail")[1].splitlines() if ln.startswith("| llama-self |"))
    assert "counts differ from the server's" in spec_line
    assert _server_pids() == []
