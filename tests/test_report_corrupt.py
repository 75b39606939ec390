"""`lab report` on damaged saves: generated corruptions of a real saved run
(made by the runner and the store with the scripted fake backend). A file
that is no results file at all is refused with a message naming it (exit
2); anything else renders what it can (exit 0) and names what it left out,
on stderr and in the report. Never a traceback, never the CLI's last-resort
"cannot render" message (that would mean the shape check missed a case),
and JSON output is strict."""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from lab.base.row import RESULT_KEYS
from lab.cli import main
from lab.profile.load import parse_profile
from lab.runner import Runner
from lab.store import RunStore
from tests.fakes import BASE_AND_SPEC, fake_registry, profile_toml


@dataclass(frozen=True)
class Corruption:
    label: str
    # takes the run directory and damages it
    apply: Callable[[Path], None]
    # False: the file is no results file at all and must be refused (exit 2)
    renders: bool = True
    # True: what was damaged must be named as left out
    noted: bool = True


@pytest.fixture(scope="module")
def good_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    registry = fake_registry()
    text = profile_toml(BASE_AND_SPEC, rounds=2, prompts=("prose", "code"))
    profile = parse_profile(text, "f.toml", registry)
    store = RunStore(profile, tmp_path_factory.mktemp("good"))
    Runner(profile, registry, store).run()
    return store.path


def _json(run: Path) -> dict[str, Any]:
    return json.loads((run / "results.json").read_text())


def _rewrite(run: Path, change: Callable[[dict[str, Any]], None]) -> None:
    data = _json(run)
    change(data)
    (run / "results.json").write_text(json.dumps(data))


def _raw(content: bytes, name: str = "results.json") -> Callable[[Path], None]:
    return lambda run: (run / name).write_bytes(content)


def _row(i: int, key: str, value: Any, drop: bool = False) -> Callable[[Path], None]:
    def change(data: dict[str, Any]) -> None:
        row = data["results"][i]
        if drop:
            row.pop(key, None)
        else:
            row[key] = value

    return lambda run: _rewrite(run, change)


def _top(key: str, value: Any, drop: bool = False) -> Callable[[Path], None]:
    def change(data: dict[str, Any]) -> None:
        if drop:
            data.pop(key, None)
        else:
            data[key] = value

    return lambda run: _rewrite(run, change)


def _profile(key: str, value: Any) -> Callable[[Path], None]:
    return lambda run: _rewrite(run, lambda d: d["profile"].__setitem__(key, value))


def _steps(lines: list[str], keep: bool = True) -> Callable[[Path], None]:
    def apply(run: Path) -> None:
        old = (run / "steps.jsonl").read_text().splitlines() if keep else []
        mid = len(old) // 2
        (run / "steps.jsonl").write_text("\n".join(old[:mid] + lines + old[mid:]) + "\n")

    return apply


WRONG_VALUES: list[Any] = ["x", [], {"a": 1}, -1, 1e308, True, None, [1, 2]]


def _fits(key: str, v: Any) -> bool:
    """Whether ``v`` is a value of the type the lab saves for ``key`` (then
    it is no damage the reader can see, and nothing is named)."""
    number = isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
    if key in ("backend", "verdict"):
        return isinstance(v, str)
    if key in ("drafter", "baseline_arm"):
        return v is None or isinstance(v, str)
    if key == "identical_to_baseline":
        return v is None or isinstance(v, bool)
    if key in ("n_tokens", "steps", "drafted", "accepted", "max_yield", "peak_mem_bytes", "first_divergence_char"):
        return v is None or (number and isinstance(v, int))
    return v is None or number


def generate() -> list[Corruption]:
    out: list[Corruption] = []

    def add(label: str, apply: Callable[[Path], None], renders: bool = True, noted: bool = True) -> None:
        out.append(Corruption(label, apply, renders, noted))

    # -- the file is not a results file -------------------------------------------
    add("empty file", _raw(b""), renders=False)
    add("binary junk", _raw(bytes(range(256)) * 8), renders=False)
    add("utf-16", lambda run: (run / "results.json").write_bytes((run / "results.json").read_text().encode("utf-16")),
        renders=False)
    for frac in (0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99):
        def cut(run: Path, frac: float = frac) -> None:
            data = (run / "results.json").read_bytes()
            (run / "results.json").write_bytes(data[: int(len(data) * frac)])

        add(f"truncated at {frac:.0%}", cut, renders=False)
    for text in ("null", "[]", "3", '"results"', "true", "{}", '{"other": 1}', "[" * 100_000 + "]" * 100_000):
        add(f"results.json is {text[:12]}", _raw(text.encode()), renders=False)
    add("results.json is a directory", lambda run: ((run / "results.json").unlink(), (run / "results.json").mkdir()),
        renders=False)
    add("results.json missing", lambda run: (run / "results.json").unlink(), renders=False)

    # -- the top level -------------------------------------------------------------
    for v in ["rows", None, {"a": 1}, 3, [1, "x", None]]:
        add(f"results = {v!r}", _top("results", v))
    for v in [{}, None, [], "demo", 3]:
        add(f"profile = {v!r}", _top("profile", v))
    add("no profile key", _top("profile", None, drop=True))
    for key, v in [("started", {"a": 1}), ("finished", [1]), ("cancelled", "yes"), ("arm_reports", [1]),
                   ("machine", "x"), ("arm_reports", {"spec": 3})]:
        add(f"{key} = {v!r}", _top(key, v), noted=key != "arm_reports" or not isinstance(v, dict))
    for key, v in [("name", 3), ("name", None), ("name", ""), ("description", ["x"]), ("run", [1]), ("run", "x"),
                   ("prompts", "p"), ("prompts", [1, 2]), ("arms", {"a": 1})]:
        add(f"profile.{key} = {v!r}", _profile(key, v))
    for v in [{"a": 1}, [1], 3]:
        add(f"run.probe = {v!r}", lambda run, v=v: _rewrite(run, lambda d: d["profile"]["run"].__setitem__("probe", v)))
    add("run.probe a missing file", lambda run: _rewrite(run, lambda d: d["profile"]["run"].__setitem__("probe", "nope.json")),
        noted=False)
    add("run.temperature a list", lambda run: _rewrite(run, lambda d: d["profile"]["run"].__setitem__("temperature", [1])))
    add("NaN and Infinity in rows", lambda run: (run / "results.json").write_text(
        (run / "results.json").read_text().replace('"tok_per_s": ', '"tok_per_s": NaN, "x_": ', 2)
        .replace('"speedup": ', '"speedup": Infinity, "y_": ', 1)))

    # -- rows ------------------------------------------------------------------------
    for v in [None, [], "row", 3, True]:
        add(f"row 0 is {v!r}", _row(0, "", None) if False else
            (lambda run, v=v: _rewrite(run, lambda d: d["results"].__setitem__(0, v))))
    for key in ("arm", "prompt", "round", "status"):
        add(f"row 1 without {key}", _row(1, key, None, drop=True))
    for key, v in [("status", "exploded"), ("status", 3), ("round", "1"), ("round", -2), ("arm", ""), ("prompt", 5)]:
        add(f"row 2 {key} = {v!r}", _row(2, key, v))
    for key in RESULT_KEYS:
        if key in ("arm", "prompt", "round", "status"):
            continue
        for v in WRONG_VALUES:
            add(f"row 3 {key} = {v!r}", _row(3, key, v), noted=not _fits(key, v))
    for key, v in [("text_origin", [[1]]), ("text_origin", "x"), ("sweep", [1]), ("engine_report", 3),
                   ("is_baseline", "no"), ("detail", ["a"]), ("text", 3)]:
        add(f"row 5 {key} = {v!r}", _row(5, key, v))
    add("every row damaged", lambda run: _rewrite(run, lambda d: d.__setitem__("results", [[1]] * 8)))

    # -- steps.jsonl --------------------------------------------------------------------
    bad_steps = ["[1, 2, 3]", '"step"', "42", "null", '{"arm": "spec"', "\x00\x01\x02",
                 '{"arm": "spec", "prompt": "prose", "round": 1, "drafted": -1, "accepted": 0}',
                 '{"arm": "spec", "prompt": "prose", "round": 1, "drafted": 2, "accepted": 5}',
                 '{"arm": "spec", "prompt": "prose", "round": 1, "drafted": "4", "accepted": 1}',
                 '{"arm": 3, "prompt": "prose", "round": 1, "drafted": 4, "accepted": 1}',
                 '{"arm": "spec", "prompt": "prose", "round": 1, "drafted": 4, "accepted": 1, "step_s": NaN}',
                 '{"arm": "spec", "prompt": "prose", "round": 1, "drafted": 4, "accepted": 1, "verify_s": "x"}',
                 "[" * 50_000]
    for line in bad_steps:
        add(f"steps line {line[:20]!r}", _steps([line]))
    add("steps all junk", _steps(["junk"] * 50, keep=False))
    add("steps binary", _raw(bytes(range(256)) * 4, "steps.jsonl"))
    add("steps a directory", lambda run: ((run / "steps.jsonl").unlink(), (run / "steps.jsonl").mkdir()), noted=False)
    add("steps missing", lambda run: (run / "steps.jsonl").unlink(), noted=False)

    # -- probe.json ----------------------------------------------------------------------
    for content in (b"{not json", b"[1]", b'{"kind": "speclab.probe", "widths": "x"}', b"\xff\xfe"):
        add(f"probe.json {content[:12]!r}", _raw(content, "probe.json"))
    return out


CASES = generate()


def test_enough_corruptions() -> None:
    assert len(CASES) >= 100, len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[f"{i}-{c.label[:40]}" for i, c in enumerate(CASES)])
def test_a_damaged_save_is_reported_not_a_traceback(good_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     case: Corruption) -> None:
    run = tmp_path / "run"
    shutil.copytree(good_run, run)
    case.apply(run)
    for fmt in ("md", "json", "csv"):
        code = main(["report", str(run), "--format", fmt])
        out, err = capsys.readouterr()
        assert "Traceback" not in err
        assert "cannot render this run" not in err, f"{case.label}: the shape check let through: {err}"
        if not case.renders:
            assert code == 2, f"{case.label}: {err}"
            assert str(run) in err, err
            continue
        assert code == 0, f"{case.label} ({fmt}): {err}"
        if case.noted:
            assert "lab: not used:" in err, f"{case.label} ({fmt}): nothing named as left out"
        if fmt == "md":
            assert out.startswith("# ")
            if case.noted:
                assert "Not all of this run could be read" in out
        if fmt == "json":
            doc = json.loads(out, parse_constant=lambda c: pytest.fail(f"{case.label}: {c} in --format json"))
            assert isinstance(doc["results"], list)
        assert not [ch for ch in out if ord(ch) < 0x20 and ch not in "\n\t"], f"{case.label}: control characters out"


def test_the_good_run_reports_with_nothing_left_out(good_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(good_run)]) == 0
    out, err = capsys.readouterr()
    assert "not used" not in err and "Not all of this run" not in out
    assert "| spec |" in out


def test_rows_that_can_be_placed_still_render(good_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One broken row costs that row, not the report: the other arm's rows
    are all in the table."""
    run = tmp_path / "run"
    shutil.copytree(good_run, run)
    data = _json(run)
    broken = next(i for i, r in enumerate(data["results"]) if r["arm"] == "spec")
    data["results"][broken] = ["not", "a", "row"]
    data["results"][0]["tok_per_s"] = "fast"
    (run / "results.json").write_text(json.dumps(data))
    assert main(["report", str(run), "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    rows = out.strip().splitlines()[1:]
    assert len(rows) == len(data["results"]) - 1
    assert f"results[{broken}]" in err and "results[0]: tok_per_s" in err


def test_non_finite_numbers_read_as_null_and_json_out_is_strict(good_run: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    shutil.copytree(good_run, run)
    text = (run / "results.json").read_text()
    data = json.loads(text)
    data["results"][0]["speedup"] = math.inf
    data["arm_reports"] = {"spec": {"x": math.nan}}
    (run / "results.json").write_text(json.dumps(data))  # Python writes NaN / Infinity
    assert main(["report", str(run), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out, parse_constant=lambda c: pytest.fail(c))
    assert doc["results"][0]["speedup"] is None and doc["arm_reports"]["spec"]["x"] is None
    assert "non-finite" in err


def test_terminal_sequences_in_a_saved_run_do_not_reach_the_terminal(good_run: Path, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    shutil.copytree(good_run, run)
    data = _json(run)
    for r in data["results"]:
        r["arm"] = r["arm"] + "\x1b[2J\x1b]52;c;b3duZWQ=\x07"
        r["detail"] = "boom\x1b[31m"
    data["profile"]["name"] = "\x1b]0;title\x07run"
    (run / "results.json").write_text(json.dumps(data))
    for fmt in ("md", "csv", "json"):
        assert main(["report", str(run), "--format", fmt]) == 0
        out, err = capsys.readouterr()
        assert "\x1b" not in out and "\x07" not in out and "\x1b" not in err
        if fmt != "json":
            assert "\\x1b[2J" in out  # shown, escaped, not dropped


@pytest.mark.parametrize("fmt", ["md", "csv", "json"])
def test_compare_with_a_damaged_run_renders_and_names_what_it_left_out(
    good_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    damaged = tmp_path / "damaged"
    shutil.copytree(good_run, damaged)
    data = _json(damaged)
    data["results"][0] = "junk"
    data["results"][1]["tok_per_s"] = {"fast": True}
    data["results"][2]["status"] = None
    data["profile"] = []
    (damaged / "results.json").write_text(json.dumps(data))
    for a, b in ((good_run, damaged), (damaged, good_run)):
        assert main(["report", str(a), "--compare", str(b), "--format", fmt]) == 0
        out, err = capsys.readouterr()
        assert "Traceback" not in err and "cannot render" not in err
        assert "results[0]" in err and "results[2]" in err
        assert out.strip()
