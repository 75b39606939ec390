"""Arms that attach to a running server by URL: what the lab refuses, how a
profile spells them, and a llama-server the test starts itself giving the
same figures as the arm the lab launches."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from lab.kit.server import attach

# -- the URL and the key --------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["http://127.0.0.1:8080", "http://localhost:1/", "https://[::1]:9000", "http://127.1.2.3:5"])
def test_loopback_urls_are_accepted(url: str) -> None:
    base, loopback = attach.check_url(url)
    assert loopback and not base.endswith("/")


@pytest.mark.parametrize(("url", "why"), [
    ("http://10.0.0.5:8080", "not a loopback address"),
    ("http://example.org", "not a loopback address"),
    ("ftp://127.0.0.1:21", "http:// or https://"),
    ("http://user:secret@127.0.0.1:8080", "credentials"),
    ("http://127.0.0.1:8080/v1", "without a path"),
    ("http://127.0.0.1:99999", "(?i)port"),
    ("127.0.0.1:8080", "http:// or https://"),
])
def test_other_urls_are_refused_with_the_reason(url: str, why: str) -> None:
    with pytest.raises(attach.AttachError, match=why):
        attach.check_url(url)


def test_a_remote_host_needs_the_arm_to_allow_it() -> None:
    base, loopback = attach.check_url("http://10.0.0.5:8080", allow_remote=True)
    assert base == "http://10.0.0.5:8080" and not loopback


def test_the_key_comes_from_the_named_variable_only() -> None:
    assert attach.auth_headers(None) == {}
    assert attach.auth_headers("LAB_KEY", {"LAB_KEY": "k1"}) == {"Authorization": "Bearer k1"}
    with pytest.raises(attach.AttachError, match="LAB_KEY.*not set"):
        attach.auth_headers("LAB_KEY", {})


# -- profiles ------------------------------------------------------------------------------------

PROFILE = """
[run]
max_tokens = 16
rounds = 1
warmup = 0
[[prompts]]
name = "p"
text = "hi"
[[arms]]
name = "started-base"
backend = "llamacpp-server"
model = "embedded:smollm2"
[[arms]]
name = "url-base"
backend = "llamacpp-server"
model = "embedded:smollm2"
url = "http://127.0.0.1:1"
[[arms]]
name = "url-spec"
backend = "llamacpp-server"
model = "embedded:smollm2"
url = "http://127.0.0.1:2"
api_key_env = "LAB_TEST_KEY"
n_max = 8
options = { spec_type = "draft-simple", draft_model = "embedded:smollm2" }
[[arms]]
name = "started-spec"
backend = "llamacpp-server"
model = "embedded:smollm2"
n_max = 8
options = { spec_type = "draft-simple", draft_model = "embedded:smollm2" }
"""


def _registry() -> Any:
    from tests.test_server_engine import _registry as reg

    return reg()


def test_url_arms_pair_with_url_baselines(tmp_path: Path) -> None:
    from lab.profile.load import parse_profile

    profile = parse_profile(PROFILE, str(tmp_path / "p.toml"), _registry())
    arms = {a.name: a for a in profile.arms}
    assert arms["url-spec"].options["url"] == "http://127.0.0.1:2"
    assert arms["url-spec"].options["api_key_env"] == "LAB_TEST_KEY"
    assert arms["url-spec"].baseline == "url-base"
    assert arms["started-spec"].baseline == "started-base"


def test_a_key_given_twice_is_refused(tmp_path: Path) -> None:
    from lab.profile.load import ProfileError, parse_profile

    text = PROFILE.replace('api_key_env = "LAB_TEST_KEY"\nn_max = 8\noptions = { spec_type',
                           'api_key_env = "A"\nn_max = 8\noptions = { api_key_env = "B", spec_type', 1)
    assert 'api_key_env = "B"' in text
    with pytest.raises(ProfileError, match="api_key_env is given twice"):
        parse_profile(text, str(tmp_path / "p.toml"), _registry())


# -- a real llama-server the test starts ------------------------------------------------------------


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A baseline llama-server and a self-drafting one (with an API key), as a
    user would have started them: the lab attaches to both."""
    from tests.test_server_engine import _INFO, _SKIP

    if _INFO is None:
        pytest.skip(_SKIP)
    from lab_llamacpp_server.client import LlamaServerClient
    from lab_llamacpp_server.command import server_args

    from lab.kit import models
    from lab.kit.server.process import ServerProcess, free_port
    from lab.registry import load_registry

    load_registry()
    model = str(models.resolve("embedded:smollm2"))
    logs = tmp_path_factory.mktemp("servers")
    started: list[ServerProcess] = []
    urls: dict[str, str] = {}
    try:
        # the model drafting for itself: every step drafts, whatever the text
        for name, spec, extra in (("base", "none", []), ("spec", "draft-simple", ["--api-key", "sesame"])):
            port = free_port()
            argv = [_INFO.path, *server_args({"extra_args": extra}, spec, 8 if spec != "none" else None, n_ctx=512,
                                             threads=1, port=port, model_path=model,
                                             draft_path=model if spec != "none" else None)]
            proc = ServerProcess(argv, str(logs / f"{name}.log"))
            proc.start()
            started.append(proc)
            urls[name] = f"http://127.0.0.1:{port}"
        for proc, url in zip(started, urls.values()):
            client = LlamaServerClient(url)
            try:
                assert client.wait_healthy(proc.alive, 300.0, lambda: None), proc.excerpt(20)
            finally:
                client.close()
        yield urls
    finally:
        for proc in started:
            proc.stop()


@pytest.mark.engine
def test_attached_arms_give_the_launched_arms_figures(servers: dict[str, str], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from lab.profile.load import parse_profile
    from lab.render.report import ReportWriter
    from lab.runner import Runner
    from lab.store import RunStore
    from tests.test_server_engine import _server_pids

    monkeypatch.setenv("LAB_TEST_KEY", "sesame")
    # no verify-cost probe: the counts and texts compared here do not need one
    text = PROFILE.replace("max_tokens = 16", "max_tokens = 32\nn_ctx = 512\nthreads = 1\nprobe = false")
    text = text.replace("http://127.0.0.1:1", servers["base"]).replace("http://127.0.0.1:2", servers["spec"])
    text = text.replace('text = "hi"', 'text = "Write a Python function that reverses a list, then use it twice."')
    assert 'spec_type = "draft-simple"' in text
    profile = parse_profile(text, str(tmp_path / "p.toml"), _registry())
    store = RunStore(profile, tmp_path / "runs")
    pids_before = set(_server_pids())
    rows = Runner(profile, registry=_registry(), store=store, listeners=[ReportWriter()]).run()
    by = {r["arm"]: r for r in rows}
    assert all(r["status"] == "ok" for r in rows), [(r["arm"], r["status"], r["detail"][:300]) for r in rows]
    url_spec, started_spec = by["url-spec"], by["started-spec"]
    assert url_spec["steps"] and url_spec["steps"] > 0
    # the same figures as the arm the lab starts: counts and text
    for key in ("n_tokens", "steps", "drafted", "accepted", "text"):
        assert url_spec[key] == started_spec[key], key
    assert by["url-base"]["text"] == by["started-base"]["text"]
    assert url_spec["identical_to_baseline"] == started_spec["identical_to_baseline"]
    # and the attached server's own counters agree
    rep = url_spec["engine_report"]
    assert rep["counts_match_server"] is True, rep["checks"]
    assert rep["metrics_delta"]["spec_decode_num_draft_tokens_total"] == url_spec["drafted"]
    assert url_spec["server_url"] == servers["spec"] and by["started-spec"]["server_url"] is None
    report = (store.path / "report.md").read_text()
    section = report.split("## Servers the lab attached to", 1)[1]
    assert f"**url-spec**: {servers['spec']}; its baseline url-base ran on {servers['base']} (a different process)" in section
    # the lab stopped what it started and left the attached servers running
    assert set(_server_pids()) == pids_before


@pytest.mark.engine
def test_a_missing_key_or_a_wrong_one_fails_the_arm(servers: dict[str, str], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from lab.profile.load import parse_profile
    from lab.runner import Runner
    from lab.store import RunStore

    arms = f"""
[[arms]]
name = "url-spec"
backend = "llamacpp-server"
url = "{servers['spec']}"
api_key_env = "LAB_TEST_KEY"
n_max = 8
options = {{ spec_type = "draft-simple", draft_model = "embedded:smollm2" }}
"""
    head = PROFILE.split("[[arms]]", 1)[0]
    for value, why in ((None, "LAB_TEST_KEY.*not set"), ("wrong", "refused the request \\(HTTP 401\\)")):
        if value is None:
            monkeypatch.delenv("LAB_TEST_KEY", raising=False)
        else:
            monkeypatch.setenv("LAB_TEST_KEY", value)
        profile = parse_profile(head + arms, str(tmp_path / "p.toml"), _registry())
        rows = Runner(profile, _registry(), RunStore(profile, tmp_path / f"runs-{value}")).run()
        assert [r["status"] for r in rows] == ["error"]
        import re

        assert re.search(why, rows[0]["detail"]), rows[0]["detail"][:300]


def test_a_local_attach_counts_its_server_as_the_engine() -> None:
    """The noise guard finds an attached local server by its listening port
    (here this test process listens), so it is the engine, not a neighbour."""
    import os
    import socket

    from lab.kit.server.attach import local_listener_pid

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        assert local_listener_pid(f"http://127.0.0.1:{port}") == os.getpid()
    assert local_listener_pid(f"http://127.0.0.1:{port}") is None
    assert local_listener_pid("http://203.0.113.9:8080") is None
