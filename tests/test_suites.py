"""Prompt suites: the lab's own suite and the readers for question files in
the shape Spec-Bench and MT-bench use (the samples here are written for these
tests)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from lab.suites import SuiteError, SuitePrompt, builtin_suites, load_suite, per_category, suite_categories

SPEC_BENCH_CATEGORIES = ["mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag"]


def write_jsonl(path: Path, records: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


# -- the lab's own suite ---------------------------------------------------------


def test_speclab_suite_covers_every_kind_of_text() -> None:
    prompts = load_suite("speclab")
    counts = Counter(p.category for p in prompts)
    for category in ("prose", "code", "conversation", "translation", "summarization", "qa", "math", "rag", "editing"):
        assert counts[category] >= 8, (category, counts[category])
    assert len(counts) >= 8
    assert len({p.name for p in prompts}) == len(prompts)
    assert all(p.turns and all(t.strip() for t in p.turns) for p in prompts)


def test_speclab_suite_has_conversations() -> None:
    prompts = load_suite("speclab")
    conversations = load_suite("speclab", ["conversation"])
    assert conversations and all(p.multi_turn for p in conversations)
    # Multi-turn prompts also occur outside the conversation category.
    assert {p.category for p in prompts if p.multi_turn} - {"conversation"}


def test_summaries_and_rag_carry_their_source_text() -> None:
    # Summarization and retrieval prompts are only meaningful with the text
    # to work from inside the prompt: far longer than the instruction alone.
    for p in load_suite("speclab", ["summarization", "rag"]):
        assert len(p.text.split()) >= 60, p.name
        assert "\n" in p.text, p.name


def test_editing_prompts_hold_the_document_to_edit() -> None:
    for p in load_suite("speclab", ["editing"]):
        instruction, _, document = p.text.partition("\n\n")
        assert len(document.split()) >= 25, p.name


def test_builtin_suites_are_listed_and_named_by_file() -> None:
    assert "speclab" in builtin_suites()


def test_categories_filter_keeps_file_order() -> None:
    prompts = load_suite("speclab")
    picked = load_suite("speclab", ["rag", "code"])
    assert {p.category for p in picked} == {"rag", "code"}
    assert picked == [p for p in prompts if p.category in ("rag", "code")]


def test_unknown_category_is_an_error_that_lists_the_known_ones() -> None:
    with pytest.raises(SuiteError, match="no prompts of categories poetry.*prose"):
        load_suite("speclab", ["code", "poetry"])


def test_unknown_suite_names_the_builtin_ones() -> None:
    with pytest.raises(SuiteError, match="speclab"):
        load_suite("no-such-suite")


def test_per_category_takes_the_first_of_each() -> None:
    prompts = load_suite("speclab")
    short = per_category(prompts, 2)
    counts = Counter(p.category for p in short)
    assert set(counts.values()) == {2}
    assert list(dict.fromkeys(p.category for p in short)) == suite_categories(prompts)
    firsts = [p for p in prompts if p.category == "math"][:2]
    assert [p for p in short if p.category == "math"] == firsts
    with pytest.raises(ValueError):
        per_category(prompts, 0)


# -- the lab's TOML format -------------------------------------------------------


def test_toml_suite_of_ones_own(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(
        '[suite]\nname = "mine"\n\n'
        '[[prompts]]\nname = "a"\ncategory = "notes"\ntext = "Write a note."\nsystem = "Be brief."\n\n'
        '[[prompts]]\nname = "b"\ncategory = "chat"\nturns = ["Hello.", "And then?"]\n',
        encoding="utf-8",
    )
    assert load_suite(path) == [
        SuitePrompt("a", "notes", ("Write a note.",), "Be brief."),
        SuitePrompt("b", "chat", ("Hello.", "And then?")),
    ]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('[[prompts]]\nname = "a"\ncategory = "c"\ntext = "t"\nanswer = "x"\n', "unknown key.*answer"),
        ('[[prompts]]\nname = "a"\ncategory = "c"\n', "either text or turns"),
        ('[[prompts]]\nname = "a"\ncategory = "c"\ntext = "t"\nturns = ["t"]\n', "either text or turns"),
        ('[[prompts]]\nname = "a"\ncategory = "c"\nturns = []\n', "non-empty list"),
        ('[[prompts]]\nname = "a"\ntext = "t"\n', "needs a category"),
        ('[[prompts]]\nname = "a"\ncategory = "c"\ntext = "t"\n[[prompts]]\nname = "a"\ncategory = "c"\ntext = "u"\n',
         "used twice"),
        ('[suite]\nname = "x"\n', "no \\[\\[prompts\\]\\]"),
        ('suite = 3\n', "\\[suite\\] must be a table"),
        ('prompts = ["a"]\n', "must be \\[\\[prompts\\]\\] tables"),
        ('prompts = "a"\n', "must be \\[\\[prompts\\]\\] tables"),
        ("x = " + "[" * 2000 + "]" * 2000 + "\n", "nested too deeply|recursion|maximum"),
    ],
)
def test_toml_suite_errors_name_the_file_and_the_entry(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(SuiteError, match=message) as info:
        load_suite(path)
    assert str(path) in str(info.value)


# -- question files (Spec-Bench, MT-bench) ---------------------------------------


def spec_bench_sample(path: Path) -> Path:
    return write_jsonl(path, [
        {"question_id": 1, "category": "mt_bench", "turns": ["Plan a picnic for six.", "Now for twelve."]},
        {"question_id": 2, "category": "translation", "turns": ["Translate into English: Guten Morgen."]},
        {"question_id": 3, "category": "summarization", "turns": ["Summarize: The shop opens at nine and closes at five."]},
        {"question_id": 4, "category": "qa", "turns": ["Why do cats purr?"]},
        {"question_id": 5, "category": "math_reasoning", "turns": ["What is 17 times 3? Explain."]},
        {"question_id": 6, "category": "rag", "turns": ["Context: the bus leaves at 8.\nQuestion: when does it leave?"]},
        {"question_id": 7, "category": "qa", "turns": ["Why is snow white?"]},
    ])


def mt_bench_sample(path: Path) -> Path:
    # MT-bench questions hold two turns and sometimes a reference answer.
    return write_jsonl(path, [
        {"question_id": 81, "category": "writing", "turns": ["Write a postcard from a lighthouse.", "Make it rhyme."]},
        {"question_id": 82, "category": "math", "turns": ["What is 2 + 2?", "And times 3?"], "reference": ["4", "12"]},
        {"question_id": 83, "category": "coding", "turns": ["Reverse a string in Python.", "Now in C."]},
    ])


def test_spec_bench_questions(tmp_path: Path) -> None:
    prompts = load_suite(spec_bench_sample(tmp_path / "question.jsonl"))
    assert suite_categories(prompts) == SPEC_BENCH_CATEGORIES
    assert prompts[0] == SuitePrompt("mt_bench-1", "mt_bench", ("Plan a picnic for six.", "Now for twelve."))
    assert [p.name for p in load_suite(tmp_path / "question.jsonl", ["qa"])] == ["qa-4", "qa-7"]


def test_mt_bench_questions_ignore_the_reference(tmp_path: Path) -> None:
    prompts = load_suite(mt_bench_sample(tmp_path / "question.jsonl"))
    assert [p.name for p in prompts] == ["writing-81", "math-82", "coding-83"]
    assert all(len(p.turns) == 2 for p in prompts)
    assert prompts[1].turns == ("What is 2 + 2?", "And times 3?")


def test_a_benchmark_directory_reads_its_question_file(tmp_path: Path) -> None:
    spec_bench_sample(tmp_path / "question.jsonl")
    assert len(load_suite(tmp_path)) == 7


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"question_id": 1, "category": "qa", "turns": ["a"]}', "{not json"], ":2: not JSON"),
        (['{"question_id": 1, "turns": ["a"]}'], ":1: missing category"),
        (['{"question_id": 1, "category": "qa", "turns": []}'], ":1: turns must be"),
        (['{"question_id": 1, "category": "qa", "turns": ["a"]}', '{"question_id": 1, "category": "qa", "turns": ["b"]}'],
         ":2: question_id 1 is used twice"),
        (["[1, 2]"], ":1: a question must be a JSON object"),
    ],
)
def test_question_file_errors_name_the_line(tmp_path: Path, lines: list[str], message: str) -> None:
    path = tmp_path / "question.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(SuiteError, match=message):
        load_suite(path)


def test_blank_lines_are_skipped_and_line_numbers_stay_true(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text('{"question_id": 1, "category": "qa", "turns": ["a"]}\n\n{"oops": 1}\n', encoding="utf-8")
    with pytest.raises(SuiteError, match=":3: missing"):
        load_suite(path)


def test_a_question_file_that_is_not_utf8_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_bytes(b'{"question_id": 1, "category": "qa", "turns": ["caf\xe9"]}\n')
    with pytest.raises(SuiteError, match="not UTF-8") as info:
        load_suite(path)
    assert str(path) in str(info.value)


def test_a_fifo_is_refused_instead_of_read(tmp_path: Path) -> None:
    import os

    if not hasattr(os, "mkfifo"):
        pytest.skip("hardware: no FIFOs on this system")
    path = tmp_path / "q.jsonl"
    os.mkfifo(path)
    with pytest.raises(SuiteError, match="not a regular file"):
        load_suite(path)


def test_a_line_separator_inside_a_json_string_does_not_split_the_line(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text('{"question_id": 1, "category": "qa", "turns": ["one\u2028two"]}\n', encoding="utf-8")
    (prompt,) = load_suite(path)
    assert prompt.text == "one\u2028two"
