"""Hostile files: the suites, probes and saved runs the lab reads, as an
attacker or a clumsy user would hand them over. Each case reproduces one way
in and asserts the clean outcome: a profile refused with a ProfileError
naming the file and key, or a report that renders what it can and names what
it left out; never a read outside the profile's directory, a hang, a read
without end, or a traceback.

Categories: paths (a named directory whose file leads outside), special
files (FIFOs and devices in place of a file), numbers (integers of
thousands of digits, floats past range), text (lone surrogates, prompts past
the prompt-file cap, a system message that is no string), probes (figures
the prediction cannot take), compare (escapes on stderr).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lab.base.probe import Probe
from lab.cli import main
from lab.profile.load import ProfileError, load_profile, parse_profile
from lab.profile.read import MAX_TEXT_BYTES
from lab.render.report import render_markdown
from lab.runner import Runner
from lab.store import RunStore, load_run
from lab.suites import readers
from tests.fakes import BASE_AND_SPEC, fake_registry, profile_toml

ROOT = Path(__file__).resolve().parents[1]

HEAD = """[profile]
name = "hostile"

[run]
max_tokens = 16
rounds = 1
{run}
[[prompts]]
{prompt}

[[arms]]
name = "base"
backend = "llamacpp"
model = "embedded:smollm2"
"""


def write_profile(d: Path, prompt: str = 'name = "p"\ntext = "Write about tides."', run: str = "") -> Path:
    path = d / "profile.toml"
    path.write_text(HEAD.format(prompt=prompt, run=run), encoding="utf-8")
    return path


def refused(path: Path, registry: Any, *words: str) -> ProfileError:
    with pytest.raises(ProfileError) as info:
        load_profile(path, registry)
    msg = str(info.value)
    assert msg.startswith(str(path)), msg
    for w in words:
        assert w in msg, msg
    assert "\x1b" not in msg and "\n" not in msg
    return info.value


def a_probe(**change: Any) -> dict[str, Any]:
    good = Probe("fake", "fake-model", "decode", (1, 2, 4, 8), ((1.0, 1.1, 1.3, 1.9), (1.0, 1.05, 1.35, 2.0)))
    return {**good.to_json(), **change}


def question(qid: Any = 1, category: str = "qa", turns: Any = ("What is a tide?",), **more: Any) -> str:
    return json.dumps({"question_id": qid, "category": category, "turns": list(turns), **more})


def report_subprocess(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`lab report` in a child bounded in time and memory: a read that never
    ends (a FIFO) or never stops (/dev/zero) fails the test, not the suite."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "plugins")])}

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 * 1024**3, 2 * 1024**3))

    return subprocess.run([sys.executable, "-m", "lab.cli", "report", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, preexec_fn=limit, check=False)


# -- paths: a named directory whose file leads outside ---------------------------------

def test_a_suite_directory_whose_question_file_leads_outside_is_refused(tmp_path: Path, registry: Any) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.jsonl").write_text(question(category="SECRET-TEXT") + "\n")
    d = tmp_path / "prof"
    (d / "qdir").mkdir(parents=True)
    (d / "qdir" / "question.jsonl").symlink_to(outside / "secret.jsonl")
    path = write_profile(d, 'suite = "qdir"')
    err = refused(path, registry, "outside the profile's directory", "prompts[0].suite")
    assert "SECRET" not in str(err)


def test_a_suite_directory_held_inside_still_reads(tmp_path: Path, registry: Any) -> None:
    d = tmp_path / "prof"
    (d / "qdir").mkdir(parents=True)
    (d / "data.jsonl").write_text(question() + "\n")
    (d / "qdir" / "question.jsonl").symlink_to(d / "data.jsonl")  # a symlink that stays inside is fine
    profile = load_profile(write_profile(d, 'suite = "qdir"'), registry)
    assert [p.text for p in profile.prompts] == ["What is a tide?"]


def test_a_suite_directory_outside_through_a_symlinked_parent_is_refused(tmp_path: Path, registry: Any) -> None:
    outside = tmp_path / "outside"
    (outside / "q").mkdir(parents=True)
    (outside / "q" / "question.jsonl").write_text(question() + "\n")
    d = tmp_path / "prof"
    d.mkdir()
    (d / "link").symlink_to(outside)
    refused(write_profile(d, 'suite = "link/q"'), registry, "outside the profile's directory")


def test_a_probe_directory_whose_probe_file_leads_outside_is_refused(tmp_path: Path, registry: Any) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "probe.json").write_text(json.dumps(a_probe()))
    d = tmp_path / "prof"
    (d / "rd").mkdir(parents=True)
    (d / "rd" / "probe.json").symlink_to(outside / "probe.json")
    refused(write_profile(d, run='probe = "rd"'), registry, "outside the profile's directory", "run.probe")
    # the same probe copied inside is read
    (d / "rd" / "probe.json").unlink()
    shutil.copy(outside / "probe.json", d / "rd" / "probe.json")
    assert load_profile(write_profile(d, run='probe = "rd"'), registry).run.probe == "rd"


# -- special files in place of a file ---------------------------------------------------

@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_suite_that_is_no_regular_file_is_refused(tmp_path: Path, registry: Any, kind: str) -> None:
    d = tmp_path / "prof"
    d.mkdir()
    q = d / "q.jsonl"
    os.mkfifo(q) if kind == "fifo" else q.symlink_to("/dev/zero")
    # a symlink to /dev/zero leads outside: allowed here, it is still refused as no regular file
    run = "allow_outside_paths = true" if kind == "dev-zero" else ""
    refused(write_profile(d, 'suite = "q.jsonl"', run=run), registry, "not a regular file")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_profile_probe_that_is_no_regular_file_is_refused(tmp_path: Path, registry: Any, kind: str) -> None:
    d = tmp_path / "prof"
    (d / "rd").mkdir(parents=True)
    p = d / "rd" / "probe.json"
    os.mkfifo(p) if kind == "fifo" else p.symlink_to("/dev/zero")
    run = 'probe = "rd"' + ("\nallow_outside_paths = true" if kind == "dev-zero" else "")
    refused(write_profile(d, run=run), registry, "not a regular file")


@pytest.fixture(scope="module")
def good_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    registry = fake_registry()
    profile = parse_profile(profile_toml(BASE_AND_SPEC, rounds=1, prompts=("prose", "code")), "f.toml", registry)
    store = RunStore(profile, tmp_path_factory.mktemp("good"))
    Runner(profile, registry, store).run()
    (store.path / "probe.json").unlink(missing_ok=True)
    return store.path


@pytest.fixture()
def run(good_run: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(good_run, out)
    return out


def _special(path: Path, kind: str) -> None:
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_results_that_are_no_regular_file_are_refused_at_once(run: Path, kind: str) -> None:
    _special(run / "results.json", kind)
    got = report_subprocess(str(run))
    assert got.returncode == 2, got.stderr
    # a FIFO inside the run is no regular file; a link to /dev/zero is refused
    # first for leading out of the run directory: either way nothing is opened
    why = "not a regular file" if kind == "fifo" else "resolves outside"
    assert why in got.stderr and str(run) in got.stderr
    assert "Traceback" not in got.stderr


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
@pytest.mark.parametrize("name", ["probe.json", "steps.jsonl"])
def test_a_probe_or_steps_that_is_no_regular_file_costs_its_section(run: Path, kind: str, name: str) -> None:
    _special(run / name, kind)
    got = report_subprocess(str(run))
    assert got.returncode == 0, got.stderr
    why = "not a regular file" if kind == "fifo" else "resolves outside the run directory"
    assert "lab: not used:" in got.stderr and name in got.stderr and why in got.stderr, got.stderr
    assert got.stdout.startswith("# ") and "Not all of this run could be read" in got.stdout


def test_a_results_file_over_its_cap_is_refused(run: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    import lab.store

    monkeypatch.setattr(lab.store, "MAX_RESULTS_BYTES", 100)
    assert main(["report", str(run)]) == 2
    assert "may be at most 100" in capsys.readouterr().err


# -- numbers -------------------------------------------------------------------------

def test_a_jsonl_suite_with_a_5000_digit_integer_is_refused(tmp_path: Path, registry: Any) -> None:
    d = tmp_path / "prof"
    d.mkdir()
    (d / "q.jsonl").write_text('{"question_id": ' + "9" * 5000 + ', "category": "qa", "turns": ["hi"]}\n')
    refused(write_profile(d, 'suite = "q.jsonl"'), registry, "q.jsonl:1", "number too long")


def test_a_toml_suite_with_a_5000_digit_integer_is_refused(tmp_path: Path, registry: Any) -> None:
    d = tmp_path / "prof"
    d.mkdir()
    (d / "s.toml").write_text('[suite]\nname = "x"\n\n[[prompts]]\nname = "a"\ncategory = "c"\ntext = "hi"\n'
                              f"junk = {'9' * 5000}\n")
    refused(write_profile(d, 'suite = "s.toml"'), registry, "s.toml", "not valid TOML")


@pytest.mark.parametrize("digits", [20, 4000, 5000])
def test_a_profile_integer_past_64_bits_is_refused_at_its_key(tmp_path: Path, registry: Any, digits: int) -> None:
    path = tmp_path / "p.toml"
    path.write_text(HEAD.format(prompt='name = "p"\ntext = "x"', run=f"seed = {'9' * digits}"))
    err = refused(path, registry)
    assert len(str(err)) < 400, "the number is printed whole"
    if digits < 4300:  # past Python's own limit tomllib refuses the document as a whole
        assert err.key == "run.seed" and err.line == 7, err


@pytest.mark.parametrize("change", [
    {"widths": [1e400, 2]}, {"widths": [1, 2, 4, 8e400]}, {"widths": [1, 2.5, 4, 8]}, {"widths": [1, 1, 4, 8]},
    {"seconds": [[0, 1, 1, 1]]}, {"seconds": [[1, 1, 1, 1e400]]}, {"seconds": [[1, -1, 1, 1]]},
    {"seconds": [[1e-320, 1, 1, 1e300]]}, {"bandwidth_bytes_s": "fast"}, {"model_bytes": -3},
    {"threads": 1e400},
])
def test_a_probe_with_impossible_figures_is_refused_by_the_check(tmp_path: Path, registry: Any,
                                                                 change: dict[str, Any]) -> None:
    d = tmp_path / "prof"
    d.mkdir()
    (d / "probe.json").write_text(json.dumps(a_probe(**change)).replace("Infinity", "1e400"))
    refused(write_profile(d, run='probe = "probe.json"'), registry, "run.probe")


@pytest.mark.parametrize("change", [
    {"widths": [1e400, 2]}, {"seconds": [[0, 1, 1, 1]]}, {"seconds": [[1, 1, 1, 1e400]]}, {"threads": 1e400},
])
def test_a_run_probe_with_impossible_figures_costs_the_prediction_only(
    run: Path, capsys: pytest.CaptureFixture[str], change: dict[str, Any]
) -> None:
    (run / "probe.json").write_text(json.dumps(a_probe(**change)).replace("Infinity", "1e400"))
    for fmt in ("md", "json", "csv"):
        assert main(["report", str(run), "--format", fmt]) == 0
        out, err = capsys.readouterr()
        assert "cannot render" not in err and "Traceback" not in err
        assert "lab: not used:" in err and "probe" in err
        if fmt == "md":
            assert "## Prediction" in out and "## Roofline" in out


def test_the_good_probe_still_predicts(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (run / "probe.json").write_text(json.dumps(a_probe()))
    assert main(["report", str(run)]) == 0
    out, err = capsys.readouterr()
    assert "not used" not in err
    assert "| arm | prompt | n_max | measured | predicted (error) |" in out


def test_a_probe_the_arithmetic_cannot_take_drops_the_prediction_with_a_line(run: Path) -> None:
    from lab.render.report import load_for_report

    data = load_for_report(run)
    # a Probe built in code is not checked as a file is: a zero pass
    data["probe"] = Probe("fake", "fake-model", "decode", (1, 2), ((0.0, 1.0),))
    out = render_markdown(data)
    assert "No prediction: the probe could not be used (ZeroDivisionError" in out
    assert "## Statistics" in out and "## Roofline" in out


def test_a_steps_line_with_a_5000_digit_integer_costs_that_line(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = (run / "steps.jsonl").read_text().splitlines()
    record = json.loads(lines[0])
    lines.insert(1, json.dumps(record).replace(f'"drafted": {record["drafted"]}', '"drafted": ' + "7" * 5000))
    (run / "steps.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["report", str(run)]) == 0
    out, err = capsys.readouterr()
    assert "steps.jsonl" in err and "line 2" in err
    assert "## Acceptance per draft position" in out


@pytest.mark.parametrize("number", ["9" * 5000, "1e400", "-1e400"])
def test_results_numbers_past_range_are_read_as_null_and_named(run: Path, capsys: pytest.CaptureFixture[str],
                                                                number: str) -> None:
    text = (run / "results.json").read_text()
    data = json.loads(text)
    data["results"][0]["tok_per_s"] = "@@"
    (run / "results.json").write_text(json.dumps(data).replace('"@@"', number))
    loaded = load_run(run)
    assert loaded["results"][0]["tok_per_s"] is None
    assert any("out of range" in line for line in loaded["unreadable"])
    for fmt in ("md", "json", "csv"):
        assert main(["report", str(run), "--format", fmt]) == 0
        _, err = capsys.readouterr()
        assert "out of range" in err and "cannot render" not in err


# -- text ----------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["category", "turn", "system", "question_id"])
def test_a_lone_surrogate_in_a_suite_is_refused(tmp_path: Path, registry: Any, where: str) -> None:
    d = tmp_path / "prof"
    d.mkdir()
    fields: dict[str, Any] = {"question_id": 1, "category": "qa", "turns": ["hi"]}
    if where == "turn":
        fields["turns"] = ["hi \ud800 there"]
    elif where == "system":
        fields["system"] = "be \udfff brief"
    else:
        fields[where] = "q\ud83d"
    (d / "q.jsonl").write_text(json.dumps(fields) + "\n")  # json writes them as \\udXXX escapes
    refused(write_profile(d, 'suite = "q.jsonl"'), registry, "q.jsonl:1", "lone surrogate")


def test_a_lone_surrogate_category_never_reaches_a_run(tmp_path: Path) -> None:
    """What the case did: the check passed, the run's report then failed on
    the category and left report.md empty. The suite is refused before."""
    d = tmp_path / "prof"
    d.mkdir()
    (d / "q.jsonl").write_text(json.dumps({"question_id": 1, "category": "\ud800", "turns": ["hi"]}) + "\n")
    text = profile_toml(BASE_AND_SPEC).replace('name = "prose"\ntext = "Write about prose."', 'suite = "q.jsonl"')
    with pytest.raises(ProfileError, match="lone surrogate"):
        parse_profile(text, str(d / "f.toml"), fake_registry())


def test_the_suite_prompt_cap_is_the_prompt_file_cap() -> None:
    assert readers.MAX_PROMPT_BYTES == MAX_TEXT_BYTES


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["jsonl", "toml"])
@pytest.mark.parametrize("where", ["turn", "system"])
def test_a_suite_prompt_past_the_prompt_cap_is_refused(tmp_path: Path, registry: Any, fmt: str, where: str) -> None:
    d = tmp_path / "prof"
    d.mkdir()
    big = "tides " * (MAX_TEXT_BYTES // 6 + 2)
    if fmt == "jsonl":
        (d / "q.jsonl").write_text(question(turns=[big] if where == "turn" else ["hi"],
                                            **({"system": big} if where == "system" else {})) + "\n")
    else:
        entry = f"text = {json.dumps(big)}" if where == "turn" else f'text = "hi"\nsystem = {json.dumps(big)}'
        (d / "q.toml").write_text(f'[suite]\nname = "x"\n\n[[prompts]]\nname = "a"\ncategory = "c"\n{entry}\n')
    refused(write_profile(d, f'suite = "q.{fmt}"'), registry, f"may be at most {MAX_TEXT_BYTES:,}")


def test_a_suite_prompt_under_the_cap_reads(tmp_path: Path, registry: Any) -> None:
    d = tmp_path / "prof"
    d.mkdir()
    text = "t" * (MAX_TEXT_BYTES - 10)
    (d / "q.jsonl").write_text(question(turns=[text]) + "\n")
    assert load_profile(write_profile(d, 'suite = "q.jsonl"'), registry).prompts[0].text == text


@pytest.mark.parametrize("system", [5, True, ["be brief"], {"a": 1}])
def test_a_jsonl_system_that_is_no_string_is_refused_naming_file_line_and_key(tmp_path: Path, registry: Any,
                                                                               system: Any) -> None:
    d = tmp_path / "prof"
    d.mkdir()
    (d / "q.jsonl").write_text(question() + "\n" + question(qid=2, system=system) + "\n")
    refused(write_profile(d, 'suite = "q.jsonl"'), registry, "q.jsonl:2", "system must be a string")


def test_a_jsonl_system_string_or_null_is_taken(tmp_path: Path, registry: Any) -> None:
    d = tmp_path / "prof"
    d.mkdir()
    (d / "q.jsonl").write_text(question(system="Be brief.") + "\n" + question(qid=2, system=None) + "\n")
    prompts = load_profile(write_profile(d, 'suite = "q.jsonl"'), registry).prompts
    assert [p.system for p in prompts] == ["Be brief.", None]


# -- compare: escapes on stderr ----------------------------------------------------------

def test_compare_warnings_in_csv_reach_stderr_escaped(run: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "other"
    shutil.copytree(run, other)

    def change(data: dict[str, Any]) -> None:
        data["machine"] = {**(data.get("machine") or {}), "platform": "evil\x1b[2J\x1b]52;c;aGk=\x07\u202e"}
        for a in data["profile"]["arms"]:
            a["name"] = a["name"] + "\x1b[31m"
        for r in data["results"]:
            r["arm"] = r["arm"] + "\x1b[31m"

    data = json.loads((other / "results.json").read_text())
    change(data)
    (other / "results.json").write_text(json.dumps(data))
    assert main(["report", str(run), "--compare", str(other), "--format", "csv"]) == 0
    _, err = capsys.readouterr()
    assert "lab: warning:" in err and "evil" in err
    assert not [ch for ch in err if (ord(ch) < 0x20 and ch != "\n") or ch == "\u202e"], err



@pytest.mark.slow
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_lossless_check_that_is_no_regular_file_is_left_out(run: Path, kind: str) -> None:
    _special(run / "lossless.json", kind)
    got = report_subprocess(str(run))
    assert got.returncode == 0, got.stderr
    assert got.stdout.startswith("# ") and "## Greedy equivalence" in got.stdout
