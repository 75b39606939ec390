"""A profile's ``[[prompts]] suite = ...`` line: what it expands into and what
it refuses, each refusal naming the file, the line and the key."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from lab.profile.load import ProfileError, load_profile, parse_profile
from lab.suites import load_suite, suite_categories

ARMS = '\n[[arms]]\nname = "base"\nbackend = "llamacpp"\nmodel = "embedded:smollm2"\n'


def profile(prompts: str) -> str:
    return f'[profile]\nname = "s"\n\n{prompts}\n{ARMS}'


def refused(text: str, path: str = "t.toml") -> ProfileError:
    with pytest.raises(ProfileError) as info:
        parse_profile(text, path)
    return info.value


def test_whole_suite_expands_with_categories_and_unique_names() -> None:
    p = parse_profile(profile('[[prompts]]\nsuite = "speclab"\n'))
    suite = load_suite("speclab")
    assert len(p.prompts) == len(suite)
    assert [q.category for q in p.prompts] == [s.category for s in suite]
    assert [q.text for q in p.prompts] == [s.text for s in suite]
    assert len({q.name.casefold() for q in p.prompts}) == len(p.prompts)
    # conversations keep their turn count; only the first turn is the text
    convo = next(q for q, s in zip(p.prompts, suite) if s.multi_turn)
    assert convo.turns > 1 and convo.text == next(s for s in suite if s.multi_turn).turns[0]


def test_categories_and_per_category_pick_the_first_of_each() -> None:
    p = parse_profile(profile('[[prompts]]\nsuite = "speclab"\ncategories = ["rag", "code"]\nper_category = 2\n'))
    suite = load_suite("speclab")
    want = [s for s in suite if s.category == "code"][:2] + [s for s in suite if s.category == "rag"][:2]
    assert [q.name for q in p.prompts] == [s.name for s in want]
    assert Counter(q.category for q in p.prompts) == {"code": 2, "rag": 2}


def test_suite_line_mixes_with_plain_prompts_and_a_name_prefix() -> None:
    text = profile(
        '[[prompts]]\nname = "mine"\ntext = "hello"\n\n'
        '[[prompts]]\nsuite = "speclab"\ncategories = "math"\nper_category = 1\n\n'
        '[[prompts]]\nname = "again"\nsuite = "speclab"\ncategories = ["math"]\nper_category = 1\nsystem = "Be brief."\n'
    )
    p = parse_profile(text)
    assert [q.category for q in p.prompts] == [None, "math", "math"]
    assert p.prompts[2].name == f"again.{p.prompts[1].name}" and p.prompts[2].system == "Be brief."
    assert p.prompts[0].turns == 1 and p.prompts[1].system is None


def test_question_file_relative_to_the_profile(tmp_path: Path) -> None:
    (tmp_path / "bench").mkdir()
    lines = [
        {"question_id": 1, "category": "math reasoning", "turns": ["What is 2+3?"]},
        {"question_id": 2, "category": "qa", "turns": ["Who wrote Hamlet?", "And when?"]},
        {"question_id": 3, "category": "qa", "turns": ["Why is the sky blue?"]},
    ]
    (tmp_path / "bench" / "question.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    path = tmp_path / "p.toml"
    path.write_text(profile('[[prompts]]\nsuite = "bench/question.jsonl"\nper_category = 1\n'))
    p = load_profile(path)
    # a category with a space still makes a name fit for a file
    assert [(q.name, q.category, q.turns) for q in p.prompts] == [
        ("math_reasoning-1", "math reasoning", 1), ("qa-2", "qa", 2),
    ]
    # a directory stands for its question.jsonl
    path.write_text(profile('[[prompts]]\nsuite = "bench"\ncategories = ["qa"]\n'))
    assert [q.name for q in load_profile(path).prompts] == ["qa-2", "qa-3"]


def test_unknown_category_names_file_line_key_and_the_known_ones() -> None:
    err = refused(profile('[[prompts]]\nsuite = "speclab"\ncategories = ["code", "poetry"]\n'))
    assert err.path == "t.toml" and err.line == 6 and err.key == "prompts[0].categories"
    assert "'poetry'" in err.message
    for known in suite_categories(load_suite("speclab")):
        assert known in err.message
    assert str(err).startswith("t.toml:6: [prompts[0].categories]")


@pytest.mark.parametrize(
    "body, line, key, fragment",
    [
        ('suite = "nosuch"\n', 5, "prompts[0].suite", "not a built-in suite (speclab)"),
        ('suite = ""\n', 5, "prompts[0].suite", "empty"),
        ('suite = 3\n', 5, "prompts[0].suite", "expected str"),
        ('suite = "speclab"\nper_category = 0\n', 6, "prompts[0].per_category", "at least 1"),
        ('suite = "speclab"\nper_category = "2"\n', 6, "prompts[0].per_category", "expected int"),
        ('suite = "speclab"\ncategories = []\n', 6, "prompts[0].categories", "empty list"),
        ('suite = "speclab"\ncategories = ["qa", "qa"]\n', 6, "prompts[0].categories", "listed twice"),
        ('suite = "speclab"\ncategories = [1]\n', 6, "prompts[0].categories", "expected str"),
        ('suite = "speclab"\ncategoreis = ["qa"]\n', 6, "prompts[0].categoreis", "did you mean 'categories'"),
        ('suite = "speclab"\ntext = "hi"\n', 6, "prompts[0].text", "takes no 'text'"),
        ('suite = "speclab"\nname = "a/b"\n', 6, "prompts[0].name", "names use"),
        ('name = "p"\ntext = "hi"\ncategories = ["qa"]\n', 7, "prompts[0].categories", "goes with suite"),
        ('name = "p"\ntext = "hi"\nper_category = 1\n', 7, "prompts[0].per_category", "goes with suite"),
    ],
)
def test_bad_suite_lines_are_refused_with_file_line_key(body: str, line: int, key: str, fragment: str) -> None:
    err = refused(profile(f"[[prompts]]\n{body}"))
    assert (err.line, err.key) == (line, key), str(err)
    assert fragment in err.message, err.message


def test_the_same_suite_twice_clashes_unless_prefixed() -> None:
    line = '[[prompts]]\nsuite = "speclab"\ncategories = ["qa"]\n'
    err = refused(profile(line + "\n" + line))
    assert err.key == "prompts[1].suite" and err.line == 9 and "clashes" in err.message and "prefix" in err.message
    p = parse_profile(profile(line + "\n" + line.replace("[[prompts]]\n", '[[prompts]]\nname = "b"\n')))
    assert len(p.prompts) == 2 * len(load_suite("speclab", ["qa"]))


def test_a_plain_prompt_that_collides_with_a_suite_prompt_is_refused() -> None:
    name = load_suite("speclab", ["qa"])[0].name
    err = refused(profile(f'[[prompts]]\nsuite = "speclab"\ncategories = ["qa"]\n\n[[prompts]]\nname = "{name}"\ntext = "x"\n'))
    assert err.key == "prompts[1].name" and "duplicate prompt name" in err.message


def test_suite_path_outside_the_profile_directory_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "q.jsonl"
    outside.write_text(json.dumps({"question_id": 1, "category": "qa", "turns": ["Hi?"]}) + "\n")
    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "p.toml"
    for given in ("../q.jsonl", str(outside)):
        path.write_text(profile(f'[[prompts]]\nsuite = "{given}"\n'))
        with pytest.raises(ProfileError) as info:
            load_profile(path)
        assert info.value.key == "prompts[0].suite" and info.value.line == 5
        assert "allow_outside_paths" in info.value.message
    path.write_text(profile('[run]\nallow_outside_paths = true\n\n[[prompts]]\nsuite = "../q.jsonl"\n'))
    assert [q.name for q in load_profile(path).prompts] == ["qa-1"]


def test_a_broken_question_file_is_refused_at_the_suite_key(tmp_path: Path) -> None:
    (tmp_path / "q.jsonl").write_text('{"question_id": 1, "category": "qa", "turns": ["ok"]}\nnot json\n')
    path = tmp_path / "p.toml"
    path.write_text(profile('[[prompts]]\nsuite = "q.jsonl"\n'))
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert info.value.key == "prompts[0].suite" and info.value.line == 5
    assert "q.jsonl:2" in info.value.message and "not JSON" in info.value.message


@pytest.mark.slow
def test_lab_check_refuses_an_unknown_category(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(profile('[[prompts]]\nsuite = "speclab"\ncategories = ["poetry"]\n'))
    out = subprocess.run([sys.executable, "-m", "lab.cli", "check", "p.toml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "p.toml:6: [prompts[0].categories]" in out.stderr and "poetry" in out.stderr
    assert "Traceback" not in out.stderr
    path.write_text(profile('[[prompts]]\nsuite = "speclab"\ncategories = ["qa"]\nper_category = 3\n'))
    out = subprocess.run([sys.executable, "-m", "lab.cli", "check", "p.toml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "1 arms x 3 prompts" in out.stdout


def test_shipped_categories_profile_covers_every_category() -> None:
    from lab.profile.load import check_profile
    from lab.registry import load_registry

    root = Path(__file__).resolve().parent.parent
    p = check_profile(root / "profiles" / "categories.toml", load_registry())
    counts = Counter(q.category for q in p.prompts)
    assert set(counts) == set(suite_categories(load_suite("speclab")))
    assert set(counts.values()) == {2}
    assert {a.drafter for a in p.arms} == {None, "ngram", "draft-model"}
