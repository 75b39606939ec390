"""Issue 15's "refuse before running" list: each profile is refused by
`lab check` (check_profile) with its file, line and key, and by `lab run`
before any engine starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lab.profile.load import ProfileError, check_profile
from lab.registry import load_registry

PROMPT = '[[prompts]]\nname = "p"\ntext = "hi"\n'
ARM = '[[arms]]\nname = "b"\nbackend = "llamacpp"\nmodel = "embedded:smollm2"\n'

# name: (profile text, key the message names, words in the message)
CASES: dict[str, tuple[str, str, str]] = {
    "arm without a model": (PROMPT + '[[arms]]\nname = "a"\nbackend = "llamacpp"\n', "arms[0].model", "add model"),
    "server arm without a model": (PROMPT + '[[arms]]\nname = "a"\nbackend = "llamacpp-server"\n',
                                   "arms[0].model", "add model"),
    "empty model": (PROMPT + '[[arms]]\nname = "a"\nbackend = "llamacpp"\nmodel = ""\n', "arms[0].model", "empty"),
    "draft-simple without a draft model": (
        PROMPT + '[[arms]]\nname = "a"\nbackend = "llamacpp-server"\nmodel = "embedded:smollm2"\n'
        'options = { spec_type = "draft-simple" }\n', "arms[0].options.spec_type", "draft_model"),
    "non-string extra_args": (
        PROMPT + '[[arms]]\nname = "a"\nbackend = "llamacpp-server"\nmodel = "embedded:smollm2"\n'
        'options = { extra_args = [1, 2] }\n', "arms[0].options.extra_args[0]", "str"),
    "empty prompt name": ('[[prompts]]\nname = ""\ntext = "hi"\n' + ARM, "prompts[0].name", "empty"),
    "non-UTF-8 prompt file": ('[[prompts]]\nname = "p"\nfile = "bad.txt"\n' + ARM, "prompts[0].file", "UTF-8"),
    "deep nesting": ("x = " + "[" * 5000 + "]" * 5000 + "\n" + PROMPT + ARM, "", "nested too deeply"),
    "missing probe file": ('[run]\nprobe = "nope.json"\n' + PROMPT + ARM, "run.probe", "no such file"),
    "arm names differing by case": (PROMPT + ARM + ARM.replace('"b"', '"B"'), "arms[1].name", "only by case"),
    "arm name with a trailing space": (PROMPT + ARM + ARM.replace('"b"', '"b "'), "arms[1].name", "names use"),
    "prompt names differing by case": (PROMPT + PROMPT.replace('"p"', '"P"') + ARM, "prompts[1].name", "only by case"),
    "prompt name with a trailing space": (PROMPT + PROMPT.replace('"p"', '"p "') + ARM, "prompts[1].name", "names use"),
}


def _write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "bad.txt").write_bytes(b"\xff\xfe not text")
    path = tmp_path / "p.toml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("case", sorted(CASES))
def test_lab_check_refuses_it(tmp_path: Path, case: str) -> None:
    text, key, words = CASES[case]
    path = _write(tmp_path, text)
    with pytest.raises(ProfileError) as err:
        check_profile(path, load_registry())
    assert err.value.path == str(path) and err.value.key == key, str(err.value)
    assert words in err.value.message
    if key:
        assert err.value.line is not None


def test_an_attached_server_arm_needs_no_model(tmp_path: Path) -> None:
    path = _write(tmp_path, PROMPT + '[[arms]]\nname = "a"\nbackend = "llamacpp-server"\nurl = "http://127.0.0.1:8080"\n')
    assert check_profile(path, load_registry()).arms[0].model is None


@pytest.mark.slow
@pytest.mark.parametrize("case", ["arm without a model", "non-UTF-8 prompt file", "deep nesting"])
def test_lab_run_refuses_it_before_anything_starts(tmp_path: Path, case: str) -> None:
    path = _write(tmp_path, CASES[case][0])
    out = tmp_path / "runs"
    res = subprocess.run([sys.executable, "-m", "lab.cli", "run", str(path), "--out", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith(f"lab: {path}") and "Traceback" not in res.stderr
    assert not out.exists()  # no run directory: nothing started
