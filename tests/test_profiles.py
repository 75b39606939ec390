"""Profile parsing and validation: every malformed profile gives one clear
ProfileError naming file, line and key; none gives a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.profile.load import ProfileError, load_profile, parse_profile

GOOD = """
[profile]
name = "t"

[run]
max_tokens = 16
rounds = 2

[[prompts]]
name = "prose"
text = "hello"

[[arms]]
name = "base"
backend = "llamacpp"
model = "embedded:smollm2"

[[arms]]
name = "ng"
backend = "llamacpp"
model = "embedded:smollm2"
drafter = "ngram"
n_max = [3, 7, 12]
drafter_options = { max_ngram = 3 }
"""


def test_good_profile_sweeps_and_infers_baseline(registry) -> None:
    p = parse_profile(GOOD, "good.toml", registry)
    assert [a.name for a in p.arms] == ["base", "ng-nmax3", "ng-nmax7", "ng-nmax12"]
    assert [a.n_max for a in p.arms[1:]] == [3, 7, 12]
    assert all(a.baseline == "base" for a in p.arms[1:])
    assert p.arms[0].is_baseline and p.arms[0].baseline is None
    assert {a.group for a in p.arms[1:]} == {"ng"}
    assert p.run.max_tokens == 16 and p.run.rounds == 2 and p.run.warmup == 1


def test_option_sweep_is_a_cartesian_product(registry) -> None:
    text = GOOD.replace("n_max = [3, 7, 12]", "n_max = [3, 7]").replace(
        "drafter_options = { max_ngram = 3 }", "drafter_options = { max_ngram = [2, 4] }"
    )
    p = parse_profile(text, "sweep.toml", registry)
    names = [a.name for a in p.arms[1:]]
    assert names == ["ng-nmax3-maxngram2", "ng-nmax3-maxngram4", "ng-nmax7-maxngram2", "ng-nmax7-maxngram4"]
    assert p.arms[2].drafter_options["max_ngram"] == 4 and p.arms[2].n_max == 3


# (description, text transformation, expected key path, expected line or None, message fragment)
def _replace(old: str, new: str):
    def f(text: str) -> str:
        assert old in text, old
        return text.replace(old, new, 1)

    return f


def _line_of(text: str, needle: str) -> int:
    for i, line in enumerate(text.splitlines(), start=1):
        if needle in line:
            return i
    raise AssertionError(needle)


BROKEN = [
    ("toml syntax", _replace('name = "t"', 'name = "t'), "", "not valid TOML"),
    ("unknown top key", lambda t: t + "\n[extra]\nx = 1\n", "extra", "unknown key 'extra'"),
    ("unknown run key", _replace("rounds = 2", "roundz = 2"), "run.roundz", "did you mean 'rounds'"),
    ("wrong run type", _replace("max_tokens = 16", 'max_tokens = "16"'), "run.max_tokens", "expected int"),
    ("bool is not int", _replace("max_tokens = 16", "max_tokens = true"), "run.max_tokens", "expected int"),
    ("negative rounds", _replace("rounds = 2", "rounds = 0"), "run.rounds", "at least 1"),
    ("prompt without name", _replace('name = "prose"\n', ""), "prompts[0].name", "missing key 'name'"),
    ("prompt text and file", _replace('text = "hello"', 'text = "hello"\nfile = "x.txt"'), "prompts[0].text", "exactly one"),
    ("empty prompt", _replace('text = "hello"', 'text = "  "'), "prompts[0].text", "empty"),
    ("prompts not tables", lambda t: 'prompts = ["a"]\n' + t.replace('[[prompts]]\nname = "prose"\ntext = "hello"', ""), "prompts[0]", "expected a table"),
    ("arm without backend", _replace('backend = "llamacpp"\nmodel = "embedded:smollm2"\n\n[[arms]]', 'model = "embedded:smollm2"\n\n[[arms]]'), "arms[0].backend", "missing key 'backend'"),
    ("unknown backend", _replace('name = "base"\nbackend = "llamacpp"', 'name = "base"\nbackend = "llamacp"'), "arms[0].backend", "unknown backend 'llamacp'"),
    ("unknown drafter", _replace('drafter = "ngram"', 'drafter = "ngrm"'), "arms[1].drafter", "unknown drafter 'ngrm'"),
    ("unknown drafter option", _replace("max_ngram = 3", "max_gram = 3"), "arms[1].drafter_options.max_gram", "did you mean 'max_ngram'"),
    ("drafter option type", _replace("max_ngram = 3", 'max_ngram = "3"'), "arms[1].drafter_options.max_ngram", "expected int"),
    ("unknown backend option", _replace('drafter = "ngram"', 'drafter = "ngram"\noptions = { n_gpu = 1 }'), "arms[1].options.n_gpu", "has no option 'n_gpu'"),
    ("n_max zero", _replace("n_max = [3, 7, 12]", "n_max = 0"), "arms[1].n_max", "at least 1"),
    ("n_max missing", _replace("n_max = [3, 7, 12]\n", ""), "arms[1].n_max", "needs n_max"),
    ("empty sweep", _replace("n_max = [3, 7, 12]", "n_max = []"), "arms[1].n_max", "empty list"),
    ("duplicate arm", lambda t: t.replace('name = "ng"', 'name = "base"').replace("n_max = [3, 7, 12]", "n_max = 3"), "arms[1].name", "duplicate arm name"),
    ("bad arm name", _replace('name = "ng"', 'name = "n g"'), "arms[1].name", "letters, digits"),
    ("unknown arm key", _replace('drafter = "ngram"', 'drafter = "ngram"\ndraftr = "x"'), "arms[1].draftr", "did you mean 'drafter'"),
    ("baseline names nothing", _replace('drafter = "ngram"', 'drafter = "ngram"\nbaseline = "nope"'), "arms[1].baseline", "no arm named 'nope'"),
    ("no arms", lambda t: t.split("[[arms]]")[0], "arms", "at least one [[arms]]"),
    ("options not a table", _replace('drafter = "ngram"', 'drafter = "ngram"\noptions = 3'), "arms[1].options", "expected a table"),
    ("drafter options without drafter", _replace('model = "embedded:smollm2"\n\n[[arms]]', 'model = "embedded:smollm2"\ndrafter_options = { max_ngram = 2 }\n\n[[arms]]'), "arms[0].drafter_options", "no drafter"),
]


@pytest.mark.parametrize("desc, mutate, key, fragment", BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_profiles_give_clear_errors(registry, tmp_path: Path, desc, mutate, key, fragment) -> None:
    text = mutate(GOOD)
    path = tmp_path / "broken.toml"
    path.write_text(text)
    with pytest.raises(ProfileError) as info:
        load_profile(path, registry)
    err = info.value
    assert err.path == str(path)
    assert err.key == key, str(err)
    assert fragment in str(err), str(err)
    assert str(path) in str(err)
    if key and err.line is not None:
        # The line named must hold the offending key (or its table header).
        leaf = key.split(".")[-1].split("[")[0]
        assert leaf in text.splitlines()[err.line - 1] or "[[" in text.splitlines()[err.line - 1], (err.line, str(err))


def test_lines_are_found_for_nested_keys(registry, tmp_path: Path) -> None:
    text = GOOD.replace("max_ngram = 3", "max_gram = 3")
    path = tmp_path / "p.toml"
    path.write_text(text)
    with pytest.raises(ProfileError) as info:
        load_profile(path, registry)
    assert info.value.line == _line_of(text, "max_gram")
    text = GOOD.replace("roundz", "rounds").replace("rounds = 2", "roundz = 2")
    path.write_text(text)
    with pytest.raises(ProfileError) as info:
        load_profile(path, registry)
    assert info.value.line == _line_of(text, "roundz")


def test_missing_file_is_a_profile_error(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="no such file"):
        load_profile(tmp_path / "nope.toml")


def test_prompt_from_file(registry, tmp_path: Path) -> None:
    (tmp_path / "essay.txt").write_text("Write about tides.")
    text = GOOD.replace('text = "hello"', 'file = "essay.txt"')
    path = tmp_path / "p.toml"
    path.write_text(text)
    p = load_profile(path, registry)
    assert p.prompts[0].text == "Write about tides."


def test_oracle_without_baseline_is_rejected(registry) -> None:
    text = GOOD.replace('drafter = "ngram"', 'drafter = "oracle"').replace("drafter_options = { max_ngram = 3 }\n", "")
    text = text.replace('name = "base"\nbackend = "llamacpp"\nmodel = "embedded:smollm2"', 'name = "base"\nbackend = "llamacpp"\nmodel = "other.gguf"')
    with pytest.raises(ProfileError, match="oracle replays"):
        parse_profile(text, "o.toml", registry)


def test_shipped_profiles_parse(registry) -> None:
    root = Path(__file__).resolve().parent.parent / "profiles"
    for path in sorted(root.glob("*.toml")):
        try:
            load_profile(path, registry)
        except ProfileError as exc:
            if "unknown backend" in str(exc) and registry.errors:
                pytest.skip(f"{path.name}: its backend plugin failed to load: {registry.errors}")
            raise


def test_the_public_names_stay_where_the_lab_imports_them() -> None:
    import lab.profile.load as profiles
    from lab.base import profile as model
    from lab.profile import errors

    for name in ("Profile", "Arm", "RunSettings", "Prompt"):
        assert getattr(profiles, name) is getattr(model, name)
    assert profiles.ProfileError is errors.ProfileError
    assert callable(profiles.check_profile) and callable(profiles.load_profile) and callable(profiles.parse_profile)
