"""A run directory read through lab.base.rundir: every file plain or gzip,
each way a JSON file fails one typed error, and no file followed out of its
run directory. Runs are real saves (runner and store over the scripted fake
backend)."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from lab.base import probe as probes
from lab.base import rundir
from lab.base.rundir import JsonFileError
from lab.cli import main
from lab.profile.load import parse_profile
from lab.runner import Runner
from lab.store import RunStore, load_run, load_steps
from tests.fakes import BASE_AND_SPEC, fake_registry, profile_toml


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    registry = fake_registry()
    profile = parse_profile(profile_toml(BASE_AND_SPEC, rounds=2, prompts=("prose", "code")), "f.toml", registry)
    store = RunStore(profile, tmp_path_factory.mktemp("saved"))
    Runner(profile, registry, store).run()
    return store.path


@pytest.fixture
def run(saved: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(saved, tmp_path / "run"))


def _gzip(path: Path) -> Path:
    gz = path.with_name(path.name + ".gz")
    gz.write_bytes(gzip.compress(path.read_bytes(), mtime=0))
    path.unlink()
    return gz


def _report(run: Path, fmt: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["report", str(run), "--format", fmt])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("fmt", ["md", "json"])
def test_a_compressed_run_reports_what_the_plain_one_does(run: Path, fmt: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    plain = _report(run, fmt, capsys)
    assert plain[0] == 0 and plain[2] == ""
    _gzip(run / rundir.RESULTS_FILE)
    _gzip(run / rundir.STEPS_FILE)
    assert not (run / rundir.RESULTS_FILE).exists()
    assert _report(run, fmt, capsys) == plain


def test_the_plain_file_wins_over_its_gz_twin(run: Path) -> None:
    (run / "results.json.gz").write_bytes(gzip.compress(b"{}"))
    assert rundir.located(run / rundir.RESULTS_FILE) == run / rundir.RESULTS_FILE
    assert load_run(run)["results"]


def test_every_reader_takes_gzip(run: Path) -> None:
    steps = load_steps(run)
    data = load_run(run)
    probes.save(_a_probe(), run)
    first = probes.find_all(run)
    for name in (rundir.RESULTS_FILE, rundir.STEPS_FILE, rundir.PROBE_FILE):
        _gzip(run / name)
    shutil.copy(run / "probe.json.gz", run / "probe-2.json.gz")
    assert load_steps(run) == steps and len(steps) > 0
    assert load_run(run)["results"] == data["results"]
    assert [p.to_json() for p in probes.find_all(run)] == [first[0].to_json()] * 2
    assert rundir.is_run_dir(run)


def _a_probe() -> probes.Probe:
    return probes.Probe(backend="fake", model="m", method="test", widths=(1, 2, 3),
                        seconds=((0.010, 0.012, 0.014),))


def test_a_results_file_symlinked_out_of_the_run_is_refused(run: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    outside = tmp_path / "elsewhere.json"
    shutil.move(run / rundir.RESULTS_FILE, outside)
    (run / rundir.RESULTS_FILE).symlink_to(outside)
    code, out, err = _report(run, "md", capsys)
    assert code == 2 and out == "" and "outside the run directory" in err and "Traceback" not in err
    with pytest.raises(ValueError, match="outside the run directory"):
        load_run(run)
    # the file named itself is read: the user chose it
    assert load_run(outside)["results"]


def test_a_symlink_inside_the_run_is_followed(run: Path) -> None:
    (run / "kept.json").write_bytes((run / rundir.RESULTS_FILE).read_bytes())
    (run / rundir.RESULTS_FILE).unlink()
    (run / rundir.RESULTS_FILE).symlink_to("kept.json")
    assert load_run(run)["results"]


def test_steps_symlinked_out_are_not_read_and_named(run: Path, tmp_path: Path) -> None:
    outside = tmp_path / "steps.jsonl"
    shutil.move(run / rundir.STEPS_FILE, outside)
    (run / rundir.STEPS_FILE).symlink_to(outside)
    problems: list[str] = []
    assert load_steps(run, problems) == []
    assert any("outside the run directory" in p for p in problems)


@pytest.mark.parametrize("content, kind", [
    (None, JsonFileError.MISSING),
    (b"\xff\xfe{}", JsonFileError.NOT_TEXT),
    (b"{", JsonFileError.NOT_JSON),
    (b"[" * 100_000 + b"]" * 100_000, JsonFileError.TOO_DEEP),
    (b"\x1f\x8b\x08\x00damaged", JsonFileError.UNREADABLE),
    # small on disk, over the cap once decompressed
    (gzip.compress(b" " * 2_000_000), JsonFileError.REFUSED),
], ids=["missing", "not-utf8", "cut-short", "deep", "damaged-gzip", "gzip-over-cap"])
def test_each_failure_is_one_typed_error(tmp_path: Path, content: bytes | None, kind: str) -> None:
    name = "f.json.gz" if content is not None and content[:2] == b"\x1f\x8b" else "f.json"
    if content is not None:
        (tmp_path / name).write_bytes(content)
    with pytest.raises(JsonFileError) as info:
        rundir.read_json(tmp_path / name, 1 << 20, "test file")
    assert info.value.kind == kind and str(info.value).startswith(str(tmp_path / name))


def test_a_directory_and_a_device_are_refused(tmp_path: Path) -> None:
    for path in (tmp_path, Path("/dev/zero")):
        with pytest.raises(JsonFileError) as info:
            rundir.read_json(path, 4096)
        assert info.value.kind == JsonFileError.REFUSED


def test_the_gz_twin_is_found_by_the_plain_name(tmp_path: Path) -> None:
    (tmp_path / "x.json.gz").write_bytes(gzip.compress(b'{"a": 1e999, "b": 2}'))
    value, beyond = rundir.read_json(tmp_path / "x.json", 4096)
    assert value == {"a": None, "b": 2} and beyond
