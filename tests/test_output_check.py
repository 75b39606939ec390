"""The output check before verdicts (lab.rows.output_check): a real model
that repeats its last token forever, run in process on llama.cpp, gets its
rows flagged as degenerate, its verdicts and report.md say so; the same
model with its usual next-token map is not flagged. And the check itself on
texts: loops, template-marker runs, ordinary prose and code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lab.base.economics import DEGENERATE_NOTE
from lab.rows.output_check import degenerate_output

PROFILE = """
[run]
max_tokens = 40
rounds = 1
warmup = 0
n_ctx = 256
threads = 1
probe = false
chat_template = false
[[prompts]]
name = "p"
text = "lighthouse ships sea"
[[arms]]
name = "base"
backend = "llamacpp"
model = "model.gguf"
[[arms]]
name = "ngram"
backend = "llamacpp"
model = "model.gguf"
drafter = "ngram"
n_max = 4
"""


def _write_model(path: Path, repeat: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    from lab_llamacpp import synthetic

    shape = synthetic.scaled("tiny")
    if repeat:
        # the greedy next token after t is t itself: the model repeats its last token
        def same(shape: Any) -> np.ndarray:
            table = np.full(shape.n_vocab, -1, dtype=np.int64)
            table[synthetic.FIRST_NORMAL:] = np.arange(synthetic.FIRST_NORMAL, shape.n_vocab)
            return table
        monkeypatch.setattr(synthetic, "next_token_table", same)
    synthetic.write(shape, path)


def _run(tmp_path: Path) -> tuple[list[dict[str, Any]], Path]:
    from lab.profile.load import parse_profile
    from lab.registry import load_registry
    from lab.runner import Runner
    from lab.store import RunStore

    registry = load_registry()
    profile = parse_profile(PROFILE, str(tmp_path / "p.toml"), registry)
    store = RunStore(profile, tmp_path / "runs")
    rows = [r.to_json() for r in Runner(profile, registry, store, []).run()]
    return rows, store.path


@pytest.mark.engine
@pytest.mark.parametrize("repeat", [True, False])
def test_a_model_that_repeats_is_flagged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, repeat: bool) -> None:
    pytest.importorskip("llama_cpp", reason="needs llama-cpp-python (scripts/setup.sh llamacpp)")
    _write_model(tmp_path / "model.gguf", repeat, monkeypatch)
    rows, run_dir = _run(tmp_path)
    assert all(r["status"] == "ok" for r in rows), [r["detail"][:200] for r in rows]
    from lab.render.report import write_report

    report = write_report(run_dir).read_text(encoding="utf-8")
    if repeat:
        for r in rows:
            assert r["degenerate_output"] and "pattern" in r["degenerate_output"], r["text"]
            assert DEGENERATE_NOTE in r["verdict"]
        assert "⚠ ngram / p r1" in report and "not representative" in report
        # the headline table's verdict says it too, not only the detail rows
        headline = next(line for line in report.splitlines() if line.startswith("| ngram |"))
        assert "(degenerate output)" in headline, headline
    else:
        assert [r["degenerate_output"] for r in rows] == [None, None], [r["text"] for r in rows]
        assert DEGENERATE_NOTE not in report and "(degenerate output)" not in report
        assert "no loop, no run of template markers" in report


def test_loops_are_found_and_prose_is_not() -> None:
    assert degenerate_output("The lighthouse stands. " * 8)
    assert "2-character" in (degenerate_output("An opening that says something first. " + "ab" * 40) or "")
    # a loop over less than half of the text is not flagged
    assert degenerate_output("An opening line that says something and goes on for a good while, more than a loop does. "
                             + "ab" * 10) is None
    prose = ("Lighthouses still matter because satellites fail, batteries die and a light on a rock is the one "
             "signal every sailor can read without a screen. They mark hazards that charts alone cannot show.")
    code = ("class LRUCache:\n    def __init__(self, capacity):\n        self.capacity = capacity\n"
            "        self.items = {}\n\n    def get(self, key):\n        return self.items.get(key, -1)\n")
    assert degenerate_output(prose) is None
    assert degenerate_output(code) is None
    assert degenerate_output("short") is None
    assert degenerate_output(None) is None


def test_template_marker_runs_are_found() -> None:
    text = "The answer is four.<|im_end|>\n<|im_end|>\n<|im_end|><|im_start|> and then some ordinary words after"
    found = degenerate_output(text)
    assert found and "run of 4 template/control tokens" in found and "<|im_end|>" in found
    # one end-of-turn marker in a long answer is not a run
    assert degenerate_output("A long and ordinary answer that ends as chat answers do, once.<|im_end|>") is None
