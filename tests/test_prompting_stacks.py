"""One prompt for every stack, on real engines: the in-process llama.cpp
backend and llama-server send the same rendered prompt (same hash, same
token count) for a model without a chat template (the lab's one fallback)
and for the embedded model's own template, and the report says so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lab.kit import prompting
from lab.profile.load import parse_profile
from lab.render.report import ReportWriter
from lab.runner import Runner
from lab.store import RunStore

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[llamacpp]')")
pytest.importorskip("gguf", reason="the tiny models are written with the gguf package")
pytestmark = pytest.mark.engine

try:
    from lab_llamacpp_server.binary import ServerNotFound, server_info

    server_info()
    _NO_SERVER = ""
except ServerNotFound as exc:  # pragma: no cover - depends on the machine
    _NO_SERVER = f"llama-server not found: {exc}"


def _registry() -> Any:
    from lab_llamacpp_server.models import register

    from lab.kit import models
    from lab.registry import load_registry

    load_registry()
    register(models.register_model)
    return load_registry()


PROFILE = """
[run]
max_tokens = 4
rounds = 1
warmup = 0
probe = false
chat_template = true

[[prompts]]
name = "code"
system = "Answer with code only."
text = "Write a Python function that reverses a linked list."

[[prompts]]
name = "prose"
text = "Write a short paragraph about lighthouses."

[[arms]]
name = "inproc-notemplate"
backend = "llamacpp"
model = "tiny:llama-notemplate"

[[arms]]
name = "server-notemplate"
backend = "llamacpp-server"
model = "tiny:llama-notemplate"

[[arms]]
name = "inproc-smollm2"
backend = "llamacpp"
model = "embedded:smollm2"

[[arms]]
name = "server-smollm2"
backend = "llamacpp-server"
model = "embedded:smollm2"
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[tuple[str, str], Any], Path]:
    if _NO_SERVER:
        pytest.skip(_NO_SERVER)
    tmp = tmp_path_factory.mktemp("stacks")
    registry = _registry()
    profile = parse_profile(PROFILE, str(tmp / "p.toml"), registry)
    store = RunStore(profile, tmp / "runs")
    rows = Runner(profile, registry, store, [ReportWriter()]).run()
    assert all(r["status"] == "ok" for r in rows), [(r["arm"], r["detail"]) for r in rows if r["status"] != "ok"]
    return {(r["arm"], r["prompt"]): r for r in rows}, store.path


def test_a_template_less_model_gets_the_same_prompt_on_both_stacks(run: tuple[dict[tuple[str, str], Any], Path]) -> None:
    rows, _ = run
    for prompt in ("code", "prose"):
        a, b = rows[("inproc-notemplate", prompt)], rows[("server-notemplate", prompt)]
        assert a["prompt_template"] == b["prompt_template"] == prompting.FALLBACK
        assert a["prompt_sha256"] == b["prompt_sha256"]
        assert a["prompt_tokens"] == b["prompt_tokens"]
    want = prompting.RenderedPrompt(
        "<|im_start|>user\nWrite a short paragraph about lighthouses.<|im_end|>\n<|im_start|>assistant\n",
        prompting.FALLBACK,
    )
    assert rows[("inproc-notemplate", "prose")]["prompt_sha256"] == want.sha256


def test_a_model_template_renders_alike_on_both_stacks(run: tuple[dict[tuple[str, str], Any], Path]) -> None:
    rows, _ = run
    for prompt in ("code", "prose"):
        a, b = rows[("inproc-smollm2", prompt)], rows[("server-smollm2", prompt)]
        assert a["prompt_template"] == b["prompt_template"] == prompting.MODEL
        assert a["prompt_sha256"] == b["prompt_sha256"]
        assert a["prompt_tokens"] == b["prompt_tokens"]
    # SmolLM2's own template adds its default system turn where the prompt
    # has none: a text the fallback does not write
    assert rows[("inproc-smollm2", "prose")]["prompt_sha256"] != rows[("inproc-notemplate", "prose")]["prompt_sha256"]
    # with a system turn it writes plain ChatML, the fallback's very text
    assert rows[("inproc-smollm2", "code")]["prompt_sha256"] == rows[("inproc-notemplate", "code")]["prompt_sha256"]


def test_the_report_says_which_arms_sent_which_text(run: tuple[dict[tuple[str, str], Any], Path]) -> None:
    _, run_dir = run
    md = (run_dir / "report.md").read_text(encoding="utf-8")
    assert "- code: every arm sent the same text (fallback-chatml or model template" in md
    assert "- prose: ⚠ 2 different texts" in md
    assert "across different prompts" not in md  # no arm is compared with a baseline across prompts
