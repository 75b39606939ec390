"""``lab check`` lists every problem of a profile, not the first only, each
with its file:line and key, root causes first (a missing model before the
baseline pairing that depends on it), with "did you mean" for model
references and backend names."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.cli import main
from lab.profile.errors import ProfileError
from lab.profile.load import check_profile

HEAD = """[profile]
name = "three"
[run]
max_tokens = 16
rounds = 1
[[prompts]]
name = "p"
text = "hello"
"""

ARM = """[[arms]]
name = "{name}"
backend = "{backend}"
model = "{model}"
"""


def _profile(tmp_path: Path, *arms: str) -> Path:
    path = tmp_path / "p.toml"
    path.write_text(HEAD + "".join(arms), encoding="utf-8")
    return path


def _line_of(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), start=1) if needle in line)


def test_three_independent_errors_print_three_each_with_its_line(tmp_path: Path, registry, capsys) -> None:
    path = _profile(
        tmp_path,
        ARM.format(name="base", backend="llamacpp", model="embedded:smolm2"),
        ARM.format(name="typo", backend="llamacp", model="embedded:smollm2"),
        ARM.format(name="ng", backend="llamacpp", model="embedded:smollm2")
        + 'drafter = "ngram"\nn_max = 3\ndrafter_options = { max_ngramm = 3 }\n',
    )
    rc = main(["check", str(path)], registry=registry)
    err = capsys.readouterr().err
    assert rc != 0
    lines = [line for line in err.splitlines() if line.startswith(f"lab: {path}:")]
    assert len(lines) == 3, err
    expected = [
        (_line_of(path, "embedded:smolm2"), "[arms[0].model]", "did you mean 'embedded:smollm2'?"),
        (_line_of(path, '"llamacp"'), "[arms[1].backend]", "did you mean 'llamacpp'?"),
        (_line_of(path, "max_ngramm"), "[arms[2].drafter_options.max_ngramm]", "max_ngram"),
    ]
    for line, (number, key, hint) in zip(lines, expected):
        assert line.startswith(f"lab: {path}:{number}: {key}"), (line, number)
        assert hint in line, line
    assert "3 problems" in err
    # a close model name is offered instead of the whole list of built-in models
    assert "tiny:qwen3" not in lines[0]


def test_a_missing_model_comes_before_the_baseline_it_breaks(tmp_path: Path, registry) -> None:
    """The oracle needs its stack's baseline; the baseline names a model that
    does not exist. The model is the root cause and is said first; the
    pairing that failed because of it is said after, as following from it."""
    path = _profile(
        tmp_path,
        ARM.format(name="base", backend="llamacpp", model="embedded:smolm2"),
        ARM.format(name="oracle", backend="llamacpp", model="embedded:smollm2") + 'drafter = "oracle"\nn_max = 3\n',
    )
    with pytest.raises(ProfileError) as info:
        check_profile(path, registry)
    problems = info.value.problems
    assert [p.key for p in problems] == ["arms[0].model", "arms[1].drafter"]
    assert "follow from a problem above" in problems[1].message
    assert "follow" not in problems[0].message


def test_one_problem_is_one_error_as_before(tmp_path: Path, registry) -> None:
    path = _profile(tmp_path, ARM.format(name="base", backend="llamacpp", model="embedded:smolm2"))
    with pytest.raises(ProfileError) as info:
        check_profile(path, registry)
    assert len(info.value.problems) == 1
    assert "\n" not in str(info.value)


def test_unknown_drafter_gets_a_did_you_mean(tmp_path: Path, registry) -> None:
    path = _profile(tmp_path, ARM.format(name="ng", backend="llamacpp", model="embedded:smollm2")
                    + 'drafter = "ngrm"\nn_max = 3\n')
    with pytest.raises(ProfileError, match="did you mean 'ngram'"):
        check_profile(path, registry)


def test_a_sweeps_arms_share_one_problem_said_once(tmp_path: Path, registry) -> None:
    path = _profile(tmp_path, ARM.format(name="ng", backend="llamacpp", model="embedded:smolm2")
                    + 'drafter = "ngram"\nn_max = [2, 3, 4]\n')
    with pytest.raises(ProfileError) as info:
        check_profile(path, registry)
    assert len(info.value.problems) == 1, str(info.value)


def test_a_refused_run_table_still_lets_outside_files_it_allowed(tmp_path: Path, registry) -> None:
    """[run] refused for one key: the prompts are not refused for what it
    allowed (a file outside the profile's directory), so the one problem
    said is the root cause."""
    outside = tmp_path / "outside.txt"
    outside.write_text("a prompt from elsewhere", encoding="utf-8")
    (tmp_path / "p").mkdir()
    path = tmp_path / "p" / "p.toml"
    path.write_text(f"""[run]
allow_outside_paths = true
max_tokenz = 3
[[prompts]]
name = "p"
file = "{outside}"
[[arms]]
name = "base"
backend = "llamacpp"
model = "embedded:smollm2"
""", encoding="utf-8")
    with pytest.raises(ProfileError) as info:
        check_profile(path, registry)
    assert [p.key for p in info.value.problems] == ["run.max_tokenz"], str(info.value)
    assert "did you mean 'max_tokens'" in str(info.value)
