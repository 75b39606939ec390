"""`lab check` says every problem of a profile in one go: several mistakes
in one [run] table or one arm are each said (not the first of the table),
and a profile that reads is held to its engines, hub models and memory
alike, each stage said even when an earlier one failed. `lab doctor` counts
the built-in models as `lab check` and `lab plugins` do."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lab.cli import main
from lab.profile.errors import ProfileError
from lab.profile.load import check_profile

# six mistakes: two in [run], one in the baseline, three in one arm
SIX = """[profile]
name = "six"

[run]
max_tokens = -4
roundz = 3
rounds = 2

[[prompts]]
name = "prose"
text = "hello"

[[arms]]
name = "baseline"
backend = "llamacpp"
model = "embedded:smollm3"

[[arms]]
name = "ngram"
backend = "llamacpp"
model = "embedded:smollm2"
drafter = "ngrm"
n_max = 0
spec_type = "x"
"""


def test_six_mistakes_are_six_problems_each_with_its_line(tmp_path: Path, registry, capsys) -> None:
    path = tmp_path / "six.toml"
    path.write_text(SIX, encoding="utf-8")
    assert main(["check", str(path)], registry=registry) == 2
    err = capsys.readouterr().err
    said = re.findall(rf"^lab: {re.escape(str(path))}:(\d+): \[(\S+)\] ", err, re.M)
    assert said == [("5", "run.max_tokens"), ("6", "run.roundz"), ("16", "arms[0].model"), ("22", "arms[1].drafter"),
                    ("23", "arms[1].n_max"), ("24", "arms[1].spec_type")], err
    assert "lab: 6 problems in" in err
    # the option that belongs to another backend is said as such, not also as an unknown key
    assert "unknown key 'spec_type'" not in err


# one prompt and the baseline every profile here starts from
BASE = """[[prompts]]
name = "p"
text = "hi"
[[arms]]
name = "base"
backend = "llamacpp"
model = "embedded:smollm2"
"""


def test_one_arm_with_three_mistakes_gives_three_problems(tmp_path: Path, registry) -> None:
    path = tmp_path / "arm.toml"
    path.write_text(BASE + """[[arms]]
name = "bad name!"
backend = "llamacpp"
model = "embedded:smollm2"
drafter = "ngram"
n_max = 4
draft_policy = "greedyy"
drafter_options = { max_ngramm = 3 }
""", encoding="utf-8")
    with pytest.raises(ProfileError) as info:
        check_profile(path, registry)
    keys = [p.key for p in info.value.problems]
    assert keys == ["arms[1].name", "arms[1].draft_policy", "arms[1].drafter_options.max_ngramm"], str(info.value)


def test_a_profile_that_reads_is_held_to_every_later_stage(tmp_path: Path, registry, capsys,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine that cannot load no longer hides an arm that will not fit:
    both are said, and the exit status is the check's failure (1)."""
    from lab_llamacpp.backend import LlamaCppBackend

    from lab.api import MissingEngine
    from lab.cli import fit as fit_lines

    path = tmp_path / "ok.toml"
    path.write_text(BASE, encoding="utf-8")
    monkeypatch.setattr(LlamaCppBackend, "missing_engine",
                        classmethod(lambda cls, options: MissingEngine("llama_cpp", "not here", "pip install x")))
    monkeypatch.setattr(fit_lines, "report_fit", lambda profile, registry: print("memory: base will not fit") or ["base"])
    assert main(["check", str(path)], registry=registry) == 1
    out, err = capsys.readouterr()
    assert "engine llama_cpp cannot load: not here" in err
    assert "memory: base will not fit" in out and "will not fit in memory here" in err
    assert "problems with its engines, memory" in err
    assert f"{path}: ok," not in out and "1 arms x 1 prompts x" in out


@pytest.mark.slow
def test_doctor_counts_the_models_check_and_plugins_count(tmp_path: Path, registry, capsys) -> None:
    from lab.kit.models import known_models

    path = tmp_path / "typo.toml"
    path.write_text('[[prompts]]\nname = "p"\ntext = "hi"\n[[arms]]\nname = "b"\nbackend = "llamacpp"\n'
                    'model = "embedded:smollm3"\n', encoding="utf-8")
    main(["check", str(path)], registry=registry)
    checked = int(re.search(r"lists all (\d+) built-in models", capsys.readouterr().err).group(1))  # type: ignore[union-attr]
    main(["doctor"], registry=registry)
    doctor = int(re.search(r"ok  plugins: .* (\d+) built-in models", capsys.readouterr().out).group(1))  # type: ignore[union-attr]
    main(["plugins"], registry=registry)
    listed = capsys.readouterr().out.split("models (built-in references", 1)[1]
    assert doctor == checked == len(known_models()) == sum(1 for ref in known_models() if ref in listed)
    assert "embedded:smollm2" in known_models()
