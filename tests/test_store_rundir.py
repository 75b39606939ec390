"""Run directories: made atomically under a bounded name, refused before the
run when they cannot be made, and a directory that stops taking writes
mid-run moves the run to a named fallback instead of losing it.

The lab runs as root in CI, where permission bits stop nothing, so every
unwritable place here is one the kernel refuses to anyone: a path under a
regular file, a directory replaced by a file or removed, /proc."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest

from lab.base.events import Event, Finished, StepEvent
from lab.profile.load import parse_profile
from lab.render.report import ReportWriter
from lab.runner import Runner
from lab.store import MAX_NAME_CHARS, RunStore, StoreError, create_run_dir, load_run, load_steps
from tests.fakes import BASE_AND_SPEC, fake_registry, profile_toml

THREE_ARMS = BASE_AND_SPEC + """
[[arms]]
name = "spec2"
backend = "fake"
n_max = 3
options = { speculative = true, accepted = [3, 1], virtual_clock = true }
"""


@pytest.fixture(scope="module")
def registry():
    return fake_registry()


def profile(registry: Any, name: str = "fake", rounds: int = 2):
    return parse_profile(profile_toml(THREE_ARMS, name=name, rounds=rounds, prompts=("prose", "code")), "f.toml", registry)


# -- names and the race -----------------------------------------------------------

def test_many_runs_started_at_once_get_distinct_directories(registry: Any, tmp_path: Path) -> None:
    p = profile(registry)
    made: list[Path] = []
    errors: list[BaseException] = []
    start = threading.Barrier(48)

    def one() -> None:
        try:
            start.wait()
            made.append(RunStore(p, tmp_path / "runs").path)
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(48)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(set(made)) == 48
    assert all((d / "results.json").is_file() and (d / "profile.toml").is_file() for d in made)


def test_processes_racing_for_one_name_each_get_their_own(tmp_path: Path) -> None:
    """Separate processes, one name: mkdir decides, never an exists-check."""
    code = (
        "import sys; from lab.store import create_run_dir; "
        "print(create_run_dir(sys.argv[1], 'same-second-run'))"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(12)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    paths = [o.strip() for o, _ in outs]
    assert len(set(paths)) == 12
    assert sorted(Path(x).name for x in paths)[0] == "same-second-run"


@pytest.mark.parametrize("name", ["x" * 300, "a/" * 200, "\x1b[2J" * 50 + "z", "...", "名前" * 100])
def test_any_profile_name_makes_a_bounded_directory_name(registry: Any, tmp_path: Path, name: str) -> None:
    p = profile(registry)
    store = RunStore(p.__class__(**{**p.__dict__, "name": name}), tmp_path)
    part = store.path.name.split("-", 2)[2]  # after the timestamp
    assert 0 < len(part) <= MAX_NAME_CHARS
    assert store.path.parent == tmp_path
    assert all(c.isalnum() or c in "_.-" for c in part) and not part.startswith(".")


# -- before the run ------------------------------------------------------------------

def test_out_at_a_file_or_under_one_is_refused(registry: Any, tmp_path: Path) -> None:
    a_file = tmp_path / "f"
    a_file.write_text("x")
    for out in (a_file, a_file / "runs", a_file / "deep" / "runs"):
        with pytest.raises(StoreError) as info:
            RunStore(profile(registry), out)
        assert str(out) in str(info.value) or str(a_file) in str(info.value)
    assert a_file.read_text() == "x"


def test_a_missing_parent_is_created(registry: Any, tmp_path: Path) -> None:
    store = RunStore(profile(registry), tmp_path / "a" / "b" / "runs")
    assert store.path.parent == tmp_path / "a" / "b" / "runs"


def test_a_directory_nobody_may_write_is_refused() -> None:
    with pytest.raises(StoreError, match="/proc/self"):
        create_run_dir("/proc/self", "run")


def _lab(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lab.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_lab_run_refuses_an_unwritable_out_before_the_run(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text(profile_toml("""
[[arms]]
name = "base"
backend = "llamacpp"
model = "embedded:smollm2"
"""))
    (tmp_path / "afile").write_text("x")
    for out in ("afile", "afile/runs", "/proc/self/runs", "/proc/self"):
        res = _lab("run", "p.toml", "--out", out, "--quiet", cwd=tmp_path)
        assert res.returncode == 2, (out, res.stderr)
        assert "Traceback" not in res.stderr
        assert out.split("/runs")[0] in res.stderr, res.stderr
        assert "loading" not in res.stderr


# -- mid-run ---------------------------------------------------------------------------

def _sabotage_after(n_finished: int, how: str, store_box: list[RunStore]):
    seen = [0]

    def listen(event: Event) -> None:
        if isinstance(event, Finished):
            seen[0] += 1
            if seen[0] == n_finished:
                d = store_box[0].path
                if how == "replaced by a file":
                    shutil.rmtree(d)
                    d.write_text("not a directory any more")
                elif how == "removed":
                    shutil.rmtree(d)
                elif how == "removed and made again":
                    shutil.rmtree(d)
                    d.mkdir()

    return listen


@pytest.mark.slow
@pytest.mark.parametrize("how", ["replaced by a file", "removed", "removed and made again"])
def test_a_run_directory_lost_mid_run_moves_the_run_to_a_named_fallback(
    registry: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    p = profile(registry)
    told: list[tuple[Path, Path | None, str]] = []
    box: list[RunStore] = []
    store = RunStore(p, tmp_path / "runs", on_moved=lambda *a: told.append(a))
    box.append(store)
    first = store.path
    report = ReportWriter(store)
    runner = Runner(p, registry, store, [_sabotage_after(3, how, box), report])
    rows = runner.run()
    try:
        assert len(rows) == 3 * 2 * 2 and all(r["status"] == "ok" for r in rows)
        assert len(told) == 1 and told[0][0] == first and told[0][1] == store.path
        assert store.moved_from == first and store.path != first
        assert Path(tempfile.gettempdir()) in store.path.parents
        saved = load_run(store.path)
        assert len(saved["results"]) == len(rows)
        assert saved["finished"] is not None
        # every step the runner measured, those written before the loss included
        steps = load_steps(store.path)
        assert len(steps) == sum(r["steps"] or 0 for r in rows) > 0
        assert (store.path / "profile.toml").read_text() == p.source
        assert (store.path / "report.md").is_file() and report.error is None
        assert runner.run_dir == str(store.path)
        assert "Traceback" not in capsys.readouterr().err
    finally:
        shutil.rmtree(store.path, ignore_errors=True)


def test_when_no_directory_takes_the_run_the_rows_stay_in_memory(
    registry: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    p = profile(registry)
    told: list[tuple[Path, Path | None, str]] = []
    box: list[RunStore] = []
    store = RunStore(p, tmp_path / "runs", on_moved=lambda *a: told.append(a))
    box.append(store)
    # the fallback's place is a file too: nothing anywhere takes the run
    blocker = tmp_path / "notadir"
    blocker.write_text("x")
    monkeypatch.setattr(tempfile, "tempdir", str(blocker))
    report = ReportWriter(store)
    rows = Runner(p, registry, store, [_sabotage_after(2, "replaced by a file", box), report]).run()
    assert len(rows) == 12 and store.memory_only
    assert len(told) == 1 and told[0][1] is None
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.slow
def test_cli_says_where_the_run_went(registry: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    """`lab run` end to end in process (the fake backend): the directory is
    replaced by a file after the first row; exit 0, the fallback is named,
    the table is printed, no traceback."""
    import lab.runner
    from lab.cli import main

    (tmp_path / "p.toml").write_text(profile_toml(THREE_ARMS, prompts=("prose", "code")))
    real_emit = lab.runner.Runner.emit
    done = [0]

    def emit(self: Runner, event: Any) -> None:
        if isinstance(event, Finished):
            done[0] += 1
            if done[0] == 2:
                shutil.rmtree(self.run_dir)
                Path(self.run_dir).write_text("x")
        real_emit(self, event)

    monkeypatch.setattr(lab.runner.Runner, "emit", emit)
    monkeypatch.chdir(tmp_path)
    code = main(["run", "p.toml", "--out", "runs", "--quiet"], registry=registry)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "Traceback" not in err
    moved = [line for line in err.splitlines() if "cannot write" in line]
    assert len(moved) == 1, err
    fallback = Path(moved[0].rsplit("the run goes on in ", 1)[1])
    try:
        assert f"saved: {fallback}" in out
        assert len(load_run(fallback)["results"]) == 3 * 2
        assert (fallback / "report.md").is_file()
    finally:
        shutil.rmtree(fallback, ignore_errors=True)


# -- strict JSON -----------------------------------------------------------------------

def test_saved_files_hold_no_nan_or_infinity(registry: Any, tmp_path: Path) -> None:
    p = profile(registry)
    store = RunStore(p, tmp_path)
    store.set_arm_report("spec", {"ratio": math.inf, "nested": [math.nan, {"x": -math.inf}], "ok": 1.5})
    from lab.base.events import Cell

    store(StepEvent(Cell("spec", "prose", 1), 0, drafted=4, accepted=2, landed=3, draft_s=math.nan,
                    verify_s=math.inf, step_s=0.1))
    store.finish()
    for name in ("results.json", "steps.jsonl"):
        text = (store.path / name).read_text()
        for line in text.splitlines() if name.endswith("jsonl") else [text]:
            json.loads(line, parse_constant=lambda c, name=name: pytest.fail(f"{name} holds {c}"))
    report = load_run(store.path)["arm_reports"]["spec"]
    assert report == {"ratio": None, "nested": [None, {"x": None}], "ok": 1.5}
    step = load_steps(store.path)[0]
    assert step["draft_s"] is None and step["verify_s"] is None and step["step_s"] == 0.1


FULL_DISK = """
import resource, signal, sys
sys.path.insert(0, sys.argv[2])
from tests.fakes import BASE_AND_SPEC, fake_registry, profile_toml
registry = fake_registry()
open("p.toml", "w").write(profile_toml(BASE_AND_SPEC, rounds=2, prompts=("prose", "code")))
# every file this process writes stops growing here: the kernel answers EFBIG
# as a full disk answers ENOSPC, for the run directory and any fallback alike
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
from lab.cli import main
sys.exit(main(["run", "p.toml", "--out", "runs", "--quiet"], registry=registry))
"""


@pytest.mark.slow
def test_a_full_disk_keeps_the_rows_in_memory_and_says_so(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parent.parent
    res = subprocess.run([sys.executable, "-c", FULL_DISK, "9000", str(root)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert "Traceback" not in res.stderr
    assert res.returncode == 1, res.stderr
    # the table has every arm x prompt though nothing more could be written
    # (below a headline, when the run was not a quiet machine's)
    lines = res.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("arm "))
    table = [line.split()[:2] for line in lines[head + 1:] if line.strip()]
    assert table == [["base", "prose"], ["base", "code"], ["spec", "prose"], ["spec", "code"]], res.stdout
    (run,) = (tmp_path / "runs").iterdir()
    assert f"cannot write {run.relative_to(tmp_path)} (File too large)" in res.stderr
    assert "no fallback directory either" in res.stderr and "the table above has every row" in res.stderr
    # what was saved before the disk filled is whole (results.json is replaced atomically)
    saved = load_run(run)
    assert 0 < len(saved["results"]) < 8 and "unreadable" not in saved


def test_strict_json_everywhere_a_run_is_written_or_exported(registry: Any, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from lab.base.strictjson import dumps
    from lab.cli import main

    assert json.loads(dumps({"a": (math.nan, 1.0), "b": {"c": -math.inf}, 3: [math.inf]})) == {
        "a": [None, 1.0], "b": {"c": None}, "3": [None]}
    p = profile(registry, rounds=1)
    store = RunStore(p, tmp_path)
    Runner(p, registry, store).run()
    data = json.loads((store.path / "results.json").read_text())
    data["results"][0]["speedup"] = math.inf  # as an older lab saved it
    (store.path / "results.json").write_text(json.dumps(data))
    for args in (["--format", "json"], ["--compare", str(store.path), "--format", "json"]):
        assert main(["report", str(store.path), *args]) == 0
        out = capsys.readouterr().out
        json.loads(out, parse_constant=lambda c, args=args: pytest.fail(f"{args}: {c}"))


@pytest.mark.parametrize("name", ["lab.log", "../x.log", "/etc/passwd", "..", "a/../../b", "x" * 400, "\x1b[2J.log", ""])
def test_a_log_file_name_stays_inside_the_run_directory(registry: Any, tmp_path: Path, name: str) -> None:
    store = RunStore(profile(registry), tmp_path / "runs")
    path = store.log_path(name)
    assert path.parent == store.path
    assert 0 < len(path.name) <= 120 and path.name not in (".", "..") and not path.name.startswith(".")
    if name == "lab.log":
        assert path.name == "lab.log"


def test_results_json_gets_the_mode_of_the_run_directorys_other_files(tmp_path: Path) -> None:
    """The atomic write goes through a private temporary file; the file it
    leaves must read like report.md beside it, not 0600."""
    import stat

    from lab.store import write_json_atomic

    write_json_atomic(tmp_path / "results.json", {"results": []})
    (tmp_path / "report.md").write_text("x", encoding="utf-8")
    mode = stat.S_IMODE((tmp_path / "results.json").stat().st_mode)
    assert mode == stat.S_IMODE((tmp_path / "report.md").stat().st_mode)
