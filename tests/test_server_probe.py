"""A llama-server arm priced by llama-server (lab_llamacpp_server.probe):
the probe starts the server as the arm would, at n_max = w - 1 and a set
acceptance that keeps all drafts or none, and times whole steps of both kinds; the prediction of a server row takes its
step cost from that probe alone, not from the in-process engine's passes,
and the report marks it as priced by the server, not with †. A cancelled
probe leaves no server behind."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from lab_llamacpp_server.probe import _tokens

from lab.analysis.measured_acceptance import PositionAcceptance
from lab.analysis.predict import ArmInputs, predict
from lab.base.probe import PRICES_STEPS, Probe
from tests.test_server_engine import _gone, _server_pids

# -- what the prediction does with a probe that prices whole steps --------------------------------


def _probe(prices: str | None) -> Probe:
    notes = {"prices": prices} if prices else {}
    return Probe(backend="b", model="m", method="x", widths=(1, 2, 3), seconds=((0.01, 0.02, 0.025),), notes=notes)


def test_a_step_priced_probe_is_the_whole_step_cost() -> None:
    full = PositionAcceptance((100, 100), (100, 100))
    inputs = ArmInputs(baseline_token_s=0.01, draft_s_per_token=0.004, plain_share=0.0, n_max=2, loop_s_per_step=0.001)
    passes = predict(full, _probe(None), inputs, [2])[0]
    steps = predict(full, _probe(PRICES_STEPS), inputs, [2])[0]
    # a pass-priced probe adds the row's draft (2 x 0.4) and loop (0.1) to T(3) = 2.5
    assert passes.cost == pytest.approx(2.5 + 0.8 + 0.1)
    # a step-priced one is the step: 3 tokens landed over 2.5 baseline tokens
    assert steps.cost == pytest.approx(2.5) and steps.step_priced
    assert steps.speedup == pytest.approx(3 / 2.5)


def test_a_step_that_keeps_some_drafts_is_priced_between_keeping_none_and_all() -> None:
    # one-row 10 ms; a step of width 3 that kept both drafts 25 ms, one that kept none 20 ms
    kept_none = {"prices": PRICES_STEPS, "kept_none_s": {"2": 0.015, "3": 0.020}}
    probe = Probe(backend="b", model="m", method="x", widths=(1, 2, 3), seconds=((0.01, 0.02, 0.025),), notes=kept_none)
    assert probe.kept_none_ratio(3) == pytest.approx(2.0) and probe.kept_none_ratio(4) is None
    assert probe.step_ratio(3, 0.0) == pytest.approx(2.0) and probe.step_ratio(3, 1.0) == pytest.approx(2.5)
    assert probe.step_ratio(3, 0.5) == pytest.approx(2.25)
    # a probe that timed no such step (a pass-priced one, a server probe saved before) prices T(w) whatever is kept
    assert _probe(PRICES_STEPS).step_ratio(3, 0.0) == pytest.approx(2.5)
    assert Probe(backend="b", model="m", method="x", widths=(1, 2, 3), seconds=((0.01, 0.02, 0.025),),
                 notes={"kept_none_s": {"3": 0.02}}).kept_none_ratio(3) is None
    # half the first draft kept, the second never: 1.5 tokens a step keeping a quarter of its 2 drafts
    half = PositionAcceptance((100, 100), (50, 0))
    inputs = ArmInputs(baseline_token_s=0.01, draft_s_per_token=0.004, plain_share=0.0, n_max=2)
    got = predict(half, probe, inputs, [2])[0]
    assert got.kept_share == pytest.approx(0.25) and got.cost == pytest.approx(2.0 + 0.25 * 0.5)
    assert got.speedup == pytest.approx(1.5 / 2.125)
    assert predict(half, _probe(PRICES_STEPS), inputs, [2])[0].kept_share is None


def test_a_runs_server_probe_sends_requests_as_long_as_the_runs_cells() -> None:
    from lab_llamacpp_server import probe

    from lab.api import BackendContext
    from lab.base.profile import RunSettings

    alone = BackendContext(RunSettings(max_tokens=400), "", lambda _t: None)
    # lab probe alone: the probe's own lengths, whatever the settings say
    assert probe.request_lengths(alone, 5) == (probe._tokens(5), probe.WARMUP_TOKENS)
    run = RunSettings(max_tokens=256, warmup_tokens=0)
    in_run = BackendContext(run, "", lambda _t: None, probe_requests=run.request_lengths())
    assert probe.request_lengths(in_run, 5) == (256, 256)
    # never fewer tokens than the width's figures need
    assert probe.request_lengths(in_run, 17) == (probe._tokens(17), 256) and probe._tokens(17) > 256
    short = RunSettings(max_tokens=24, warmup_tokens=8)
    assert probe.request_lengths(BackendContext(short, "", lambda _t: None, probe_requests=short.request_lengths()),
                                 2) == (probe._tokens(2), probe.WARMUP_TOKENS)


def test_only_a_probe_that_times_requests_keys_on_the_runs_lengths() -> None:
    from lab.probing import driver
    from lab.profile.load import parse_profile
    from lab.registry import load_registry

    registry = load_registry()
    profile = parse_profile(PROFILE, "p.toml", registry)
    specs, _ = driver.plan(profile.arms, 1, registry, None, profile.run.request_lengths())
    by = {s.backend: s for s in specs}
    assert by["llamacpp-server"].request_tokens == (72, 64) and by["llamacpp"].request_tokens is None
    assert by["llamacpp-server"].identity()["request_tokens"] == [72, 64]
    assert "request_tokens" not in by["llamacpp"].identity()
    other, _ = driver.plan(profile.arms, 1, registry, None, (120, 64))
    keys = {s.backend: s.key() for s in other}
    # a run of longer cells measures its server probe again; the in-process probe is the same
    # (until cells are long enough for a second KV depth: lab.probing.driver.deeper_depth)
    assert keys["llamacpp-server"] != by["llamacpp-server"].key() and keys["llamacpp"] == by["llamacpp"].key()


def test_the_server_says_which_arms_it_cannot_price() -> None:
    from lab_llamacpp_server.backend import LlamaDFlashBackend, LlamaServerBackend

    assert LlamaServerBackend.probe_refusal({"spec_type": "draft-simple"}) is None
    assert LlamaDFlashBackend.probe_refusal({}) is None
    assert "n-grams" in (LlamaServerBackend.probe_refusal({"spec_type": "ngram-mod"}) or "")
    assert "attached" in (LlamaServerBackend.probe_refusal({"spec_type": "draft-simple", "url": "http://x"}) or "")


def test_a_probe_prices_the_arms_it_was_taken_for() -> None:
    import dataclasses

    p = dataclasses.replace(_probe(PRICES_STEPS), origin={"arms": ["self-draft"]})
    assert p.prices_arm("self-draft", "b", "m")
    # the same backend and model, another stack (another draft): not this probe's arm
    assert not p.prices_arm("draft-1b", "b", "m")
    # a probe that names no arms (an older run) matches by backend and model
    assert _probe(None).prices_arm("any", "b", "m") and not _probe(None).prices_arm("any", "c", "m")


# -- on the real llama-server ------------------------------------------------------------------------


def _need_server() -> None:
    from lab_llamacpp_server.binary import ServerNotFound, server_info

    try:
        server_info()
    except ServerNotFound as exc:
        pytest.skip(f"llama-server not found: {exc} (bash scripts/setup.sh all,test)")


PROFILE = """
[run]
max_tokens = 72
rounds = 1
warmup = 0
threads = 1
n_ctx = 512
chat_template = false
ignore_eos = true
[[prompts]]
name = "p"
text = "Write a short poem about the sea and the lighthouse keeper."
[[arms]]
name = "base"
backend = "llamacpp"
model = "tiny:llama"
[[arms]]
name = "oracle"
backend = "llamacpp"
model = "tiny:llama"
drafter = "oracle"
n_max = 2
[[arms]]
name = "server-base"
backend = "llamacpp-server"
model = "tiny:llama"
[[arms]]
name = "server-draft"
backend = "llamacpp-server"
model = "tiny:llama"
n_max = 2
options = { spec_type = "draft-simple", draft_model = "tiny:llama" }
"""


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache of the test's own: the server probe is measured by the code
    under test, never found from an earlier run on this machine."""
    monkeypatch.setenv("LAB_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.engine
def test_a_server_row_is_priced_by_the_server(tmp_path: Path, own_cache: None) -> None:
    _need_server()
    pytest.importorskip("llama_cpp", reason="the in-process arm needs llama-cpp-python")
    from lab.analysis.run import predicted_for_rows
    from lab.base.probe import find_all
    from lab.profile.load import parse_profile
    from lab.registry import load_registry
    from lab.render.report import ReportWriter
    from lab.runner import Runner
    from lab.store import RunStore, load_run, load_steps

    registry = load_registry()
    profile = parse_profile(PROFILE, str(tmp_path / "p.toml"), registry)
    store = RunStore(profile, tmp_path / "runs")
    rows = Runner(profile, registry, store, [ReportWriter()]).run()
    assert all(r["status"] == "ok" for r in rows), [(r["arm"], r["detail"][:300]) for r in rows]
    got = find_all(store.path)
    server = next(p for p in got if p.backend == "llamacpp-server")
    engine = next(p for p in got if p.backend == "llamacpp")
    # a curve the rules refuse prices no row (a machine busy enough to move the server's steps between widths)
    assert server.trusted and engine.trusted, (server.trust.reason, engine.trust.reason)
    # the server's own figures, one per width: a baseline token, then whole steps
    assert server.method == "server-steps" and server.prices_steps and server.priced_by == "llama-server"
    assert list(server.origin["arms"]) == ["server-draft"]
    for w in server.widths:
        note = server.notes["widths"][str(w)]
        # requests as long as the run's cells (72 tokens, more than the probe's own 48-64 at w <= 3), warmed up as
        # they are, and never shorter than the width's figures need
        assert note["tokens"] == max(72, _tokens(w)) and note["warmup_tokens"] == 64 and server.pass_seconds(w) > 0
        if w > 1:
            assert f"--spec-draft-n-max {w - 1} --spec-synth-rates" in " ".join(note["argv"])
            # each step kept all its drafts or none, both timed
            assert note["full_steps"] >= 6 and note["kept_none_steps"] >= 6
            assert 0 < server.kept_none_ratio(w) < 4 * server.t_ratio(w)
    assert any(note["tokens"] == 72 > _tokens(int(w)) for w, note in server.notes["widths"].items())
    data = load_run(store.path)
    preds = {p["arm"]: p for p in predicted_for_rows(data["results"], load_steps(store.path), got)}
    row = preds["server-draft"]
    assert row["probe_matches"] and row["step_priced"] and row["priced_by"] == "llama-server"
    # its step cost is the server probe's T(3), not the in-process engine's
    at2 = next(c for c in row["curve"] if c["n_max"] == 2)
    # read between its steps that kept none and all, at the share the row keeps
    assert 0 <= at2["kept_share"] <= 1 and at2["draft_cost"] == 0.0
    assert at2["verify_cost"] == pytest.approx(server.step_ratio(3, at2["kept_share"]))
    assert at2["verify_cost"] != pytest.approx(engine.t_ratio(3), rel=1e-3)
    assert preds["oracle"]["probe_matches"] and not preds["oracle"]["step_priced"]
    report = (store.path / "report.md").read_text()
    section = report[report.index("| arm | prompt | n_max | measured | predicted"):]
    assert "| server-draft | p |" in section and "†" not in section
    assert "priced by llama-server" in report and "prices server-draft" in report
    # its T(8) is a step of 7 drafts: no batch-8 / batch-1 ratio is read from it
    server_line = next(ln for ln in report.splitlines() if "by server-steps" in ln)
    assert "batch-8/batch-1" not in server_line


@pytest.mark.engine
def test_a_cancelled_server_probe_stops_its_server(tmp_path: Path) -> None:

    _need_server()
    from lab.probing import driver, isolated
    from lab.registry import load_registry

    registry = load_registry()
    spec = driver.ProbeSpec("llamacpp-server", "tiny:llama", 1, {"spec_type": "draft-simple", "draft_model": "tiny:llama"},
                            (1, 2, 3, 4, 5, 6, 7, 8), ("a",))
    seen: list[int] = []

    def cancelled() -> bool:
        seen.extend(p for p in _server_pids() if p not in seen)
        return bool(seen)

    t0 = time.monotonic()
    got: Any = isolated.obtain_isolated(spec, registry, root=tmp_path, cancelled=cancelled)
    assert got is None and seen, "cancelled once a server ran"
    assert time.monotonic() - t0 < 60
    assert all(_gone(pid) for pid in seen), seen
    assert _server_pids() == []
    # nothing cached from a probe that did not finish
    assert not driver.cache_path(spec, tmp_path).exists()


CONCURRENT = """
[run]
max_tokens = 32
rounds = 1
warmup = 0
threads = 1
n_ctx = 512
chat_template = false
ignore_eos = true
[[prompts]]
name = "p"
text = "Write a short poem about the sea and the lighthouse keeper."
[[arms]]
name = "server-base"
backend = "llamacpp-server"
model = "tiny:llama"
concurrency = 2
[[arms]]
name = "server-draft"
backend = "llamacpp-server"
model = "tiny:llama"
n_max = 2
concurrency = 2
options = { spec_type = "draft-simple", draft_model = "tiny:llama" }
acceptance = 0.8
"""


@pytest.mark.engine
def test_a_row_of_several_streams_is_priced_at_as_many_streams(tmp_path: Path, own_cache: None) -> None:
    _need_server()
    from lab.analysis.run import predicted_for_rows
    from lab.base.probe import find_all
    from lab.profile.load import parse_profile
    from lab.registry import load_registry
    from lab.render.report import ReportWriter
    from lab.runner import Runner
    from lab.store import RunStore, load_run, load_steps

    registry = load_registry()
    profile = parse_profile(CONCURRENT, str(tmp_path / "p.toml"), registry)
    store = RunStore(profile, tmp_path / "runs")
    rows = Runner(profile, registry, store, [ReportWriter()]).run()
    assert all(r["status"] == "ok" for r in rows), [(r["arm"], r["detail"][:300]) for r in rows]
    (server,) = find_all(store.path)
    assert server.prices_steps and server.notes["streams"] == 2
    assert server.trusted, server.trust.reason
    for w in server.widths:
        note = server.notes["widths"][str(w)]
        # each width on a server with a slot per stream
        assert "--parallel 2" in " ".join(note["argv"]), note["argv"]
        if w > 1:
            # every step kept its w - 1 drafts, but for the streams' last ones cut by the token budget
            assert note["streams"] == 2 and all(note["drafted"])
            assert 0.9 * sum(note["drafted"]) <= sum(note["accepted"]) <= sum(note["drafted"])
    # no step that kept none: the streams' steps cannot be told apart in the log
    assert server.kept_none_ratio(3) is None
    data = load_run(store.path)
    (pred,) = predicted_for_rows(data["results"], load_steps(store.path), [server])
    assert pred["arm"] == "server-draft" and pred["probe_matches"] and pred["step_priced"]
    assert pred["predicted"] is not None and pred["measured"] is not None
    report = (store.path / "report.md").read_text()
    assert "2 streams at once" in report


@pytest.mark.engine
def test_lab_probe_times_server_requests_as_long_as_asked(tmp_path: Path, own_cache: None) -> None:
    _need_server()
    import json
    import subprocess
    import sys

    out = tmp_path / "probe.json"
    got = subprocess.run(
        [sys.executable, "-m", "lab.cli", "probe", "--backend", "llamacpp-server", "--model", "tiny:llama",
         "--option", "spec_type=draft-simple", "--option", "draft_model=tiny:llama", "--widths", "1-2",
         "--repeats", "1", "--threads", "1", "--tokens", "80", "--no-bandwidth", "--out", str(out)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert got.returncode == 0, got.stderr[-2000:]
    widths = json.loads(out.read_text())["notes"]["widths"]
    # 80 tokens a request (more than the probe's own 48), after a warmup of 64
    assert {w: (n["tokens"], n["warmup_tokens"]) for w, n in widths.items()} == {"1": (80, 64), "2": (80, 64)}
    alone = subprocess.run(
        [sys.executable, "-m", "lab.cli", "probe", "--backend", "llamacpp-server", "--model", "tiny:llama",
         "--tokens", "0"], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert alone.returncode == 2 and "--tokens 0" in alone.stderr and "Traceback" not in alone.stderr
