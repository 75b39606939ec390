"""Plugins that misbehave during a run: a backend whose generate() returns
None, raises what is no Exception or calls sys.exit(); whose close() or
report() raises or exits; that leaves a non-daemon thread or a process
behind. Each costs its own arm (an error row naming what went wrong, or a
line in the report), never the run: the other arm runs, report.md is
written, `lab run` ends in bounded time and leaves no process behind.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from lab.profile.load import parse_profile
from lab.registry import load_registry
from lab.render.report import ReportWriter
from lab.runner import Runner
from lab.store import RunStore
from tests.hostile_gen import ROOT, _wait4

HOSTILE_SRC = '''
import os, subprocess, sys, threading, time
from lab.api import Option
from lab.hookspecs import hookimpl
from tests.fakes import FakeBackend


class Odd(BaseException):
    pass


class Hostile(FakeBackend):
    name = "hostile"
    description = "a backend that misbehaves on purpose"
    options = (*FakeBackend.options, Option("trick", str, "none", "what it does wrong"))

    def generate(self, request, emit, cancelled):
        trick = self.opts.get("trick", "none")
        if trick == "generate-none":
            return None
        if trick == "generate-exit":
            sys.exit(3)
        if trick == "generate-base":
            raise Odd("not an Exception")
        if trick == "thread":
            threading.Thread(target=time.sleep, args=(3600,), name="plugin-sleeper").start()
        if trick in ("spawn", "spawn-group"):
            self.spawned = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"],
                                            start_new_session=trick == "spawn-group")
            with open(os.environ["HOSTILE_PIDS"], "a") as f:
                f.write(f"{self.spawned.pid}\\n")
        gen = super().generate(request, emit, cancelled)
        if trick == "huge-report":
            gen.engine_report["blob"] = "x" * 50_000_000
            gen.engine_report["kept"] = 7
        return gen

    def report(self):
        if self.opts.get("trick") == "huge-report":
            return {"arm_blob": ["y" * 1000] * 20_000, "kept": 1}
        if self.opts.get("trick") == "report-raises":
            raise RuntimeError("report failed on purpose")
        return super().report()

    def close(self):
        super().close()
        trick = self.opts.get("trick")
        if trick == "close-raises":
            raise RuntimeError("close failed on purpose")
        if trick == "close-exits":
            sys.exit(4)
        if trick == "close-base":
            raise Odd("close: not an Exception")


class Plugin:
    __name__ = "hostile_backend"

    @hookimpl
    def lab_register_backends(self, register):
        register(Hostile)


plugin = Plugin()


@hookimpl
def lab_register_backends(register):
    register(Hostile)
'''

PROFILE = """
[profile]
name = "hostile-plugins"
[run]
max_tokens = 8
rounds = 1
warmup = 0
probe = false
memory_interval_s = 0.05
[[prompts]]
name = "p"
text = "Write about tides."
[[arms]]
name = "bad"
backend = "hostile"
options = {{ virtual_clock = true, trick = "{trick}" }}
[[arms]]
name = "good"
backend = "fake"
options = {{ virtual_clock = true }}
"""


@pytest.fixture
def hostile_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    import importlib

    site = tmp_path / "site"
    site.mkdir()
    name = f"hostile_backend_{os.getpid()}_{time.monotonic_ns()}"
    (site / f"{name}.py").write_text(HOSTILE_SRC)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("HOSTILE_PIDS", str(tmp_path / "pids"))
    return importlib.import_module(name)


def run_in_process(tmp_path: Path, module: Any, trick: str) -> tuple[dict[str, dict[str, Any]], Path]:
    from tests.fakes import fake_plugin

    reg = load_registry(extra_plugins=[fake_plugin, module.plugin])
    profile = parse_profile(PROFILE.format(trick=trick), str(tmp_path / "p.toml"), reg)
    store = RunStore(profile, tmp_path / "runs")
    report = ReportWriter(store)
    rows = Runner(profile, reg, store, [report]).run()
    assert report.error is None
    assert (store.path / "report.md").is_file()
    return {r.arm: dict(r) for r in rows}, store.path


@pytest.mark.slow
@pytest.mark.parametrize("trick,words", [
    ("generate-none", "generate() returned NoneType"),
    ("generate-exit", "SystemExit"),
    ("generate-base", "Odd: not an Exception"),
])
def test_a_generate_that_fails_oddly_is_its_arms_error_row(tmp_path: Path, hostile_module: Any, trick: str,
                                                           words: str) -> None:
    t0 = time.monotonic()
    rows, _ = run_in_process(tmp_path, hostile_module, trick)
    assert rows["bad"]["status"] == "error" and words in rows["bad"]["detail"], rows["bad"]
    assert rows["good"]["status"] == "ok"
    assert time.monotonic() - t0 < 30


@pytest.mark.slow
@pytest.mark.parametrize("trick,words", [
    ("close-raises", "close() failed: RuntimeError: close failed on purpose"),
    ("close-exits", "close() failed: SystemExit"),
    ("close-base", "close() failed: Odd"),
    ("report-raises", "report() failed: RuntimeError"),
])
def test_a_close_or_report_that_fails_is_said_in_the_report(tmp_path: Path, hostile_module: Any, trick: str,
                                                             words: str) -> None:
    rows, run_dir = run_in_process(tmp_path, hostile_module, trick)
    assert rows["good"]["status"] == "ok"
    saved = json.loads((run_dir / "results.json").read_text())
    assert words in " ".join(saved["arm_reports"]["bad"]["left_behind"]["close_errors"])
    assert words in (run_dir / "report.md").read_text()


def _lab_run(tmp_path: Path, trick: str, timeout: float = 60) -> tuple[int, str, str, float, int]:
    """`lab run` as the program, the hostile backend installed as an entry point."""
    site = tmp_path / "site-dist"
    site.mkdir()
    (site / "hostile_backend_ep.py").write_text(HOSTILE_SRC)
    info = site / "hostile_backend_ep-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hostile-backend-ep\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[lab.backends]\nhostile = hostile_backend_ep\n")
    fakes = site / "fake_backend_ep.py"
    fakes.write_text("from lab.hookspecs import hookimpl\nfrom tests.fakes import FakeBackend\n\n"
                     "@hookimpl\ndef lab_register_backends(register):\n    register(FakeBackend)\n")
    info2 = site / "fake_backend_ep-0.1.dist-info"
    info2.mkdir()
    (info2 / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-backend-ep\nVersion: 0.1\n")
    (info2 / "entry_points.txt").write_text("[lab.backends]\nfake = fake_backend_ep\n")
    prof = tmp_path / "p.toml"
    prof.write_text(PROFILE.format(trick=trick))
    env_path = os.pathsep.join([str(site), str(ROOT), str(ROOT / "plugins")])
    script = (f"import os, sys; os.environ['PYTHONPATH'] = {env_path!r}; os.environ['HOSTILE_PIDS'] = "
              f"{str(tmp_path / 'pids')!r}; sys.path[:0] = {env_path!r}.split(os.pathsep); "
              "sys.argv = ['lab', 'run', '--quiet', '--out', 'runs', 'p.toml']; "
              "from lab.cli import main; sys.exit(main())")
    t0 = time.monotonic()
    rc, out, err, rss = _wait4([sys.executable, "-c", script], tmp_path, timeout)
    return rc, out, err, time.monotonic() - t0, rss


@pytest.mark.slow
def test_a_thread_a_plugin_leaves_does_not_keep_lab_run_alive(tmp_path: Path) -> None:
    rc, out, err, took, rss = _lab_run(tmp_path, "thread")
    assert rc == 0, err
    assert took < 45, took
    # the thread was left in the arm's own process, which ended without waiting for it
    report = next((tmp_path / "runs").glob("*/report.md")).read_text()
    assert "plugin-sleeper" in report and "**bad**" in report
    assert rss < 1 << 30


@pytest.mark.slow
@pytest.mark.parametrize("trick", ["spawn", "spawn-group"])
def test_processes_a_plugin_started_end_with_its_arm(tmp_path: Path, trick: str) -> None:
    rc, out, err, took, rss = _lab_run(tmp_path, trick)
    pids = [int(x) for x in (tmp_path / "pids").read_text().split()]
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    for pid in alive:  # only what this test's plugin started, by pid
        os.kill(pid, 9)
    assert not alive, f"left running: {alive}"
    assert rc == 0, err
    assert took < 45
    report = next((tmp_path / "runs").glob("*/report.md")).read_text()
    assert "ended processes it left running" in report and str(pids[0]) in report
    saved = json.loads(next((tmp_path / "runs").glob("*/results.json")).read_text())
    rows = {r["arm"]: r for r in saved["results"]}
    assert rows["bad"]["status"] == "ok" and rows["good"]["status"] == "ok"



def test_a_child_of_a_process_older_than_the_arm_is_not_the_arms_to_end() -> None:
    """A server started before the arm (by a caller, or an attached one's
    launcher) may spawn workers while the arm runs: those are not the
    plugin's leftovers and must live on, while a process the arm itself
    started is ended."""
    import subprocess

    from lab.telemetry.leftovers import Leftovers

    spawner = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys, time\n"
        "sys.stdin.readline()\n"
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(c.pid, flush=True)\n"
        "time.sleep(60)\n")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    started: list[int] = [spawner.pid]
    try:
        before = Leftovers.before_arm()
        assert spawner.stdin is not None and spawner.stdout is not None
        spawner.stdin.write("go\n")
        spawner.stdin.flush()
        worker = int(spawner.stdout.readline())
        started.append(worker)
        own = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        started.append(own.pid)
        left = before.after_arm()
        ended = [p["pid"] for p in left.get("processes_ended", [])]
        assert ended == [own.pid], left
        assert psutil.Process(worker).status() != psutil.STATUS_ZOMBIE
        assert spawner.poll() is None
    finally:
        for pid in started:  # only what this test started, by pid
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        spawner.wait(timeout=10)


# -- a drafter proposing what is no token -------------------------------------------------------

BAD_DRAFTER_SRC = '''
from lab.api import Draft, Drafter, Option
from lab.hookspecs import hookimpl


class BadIds(Drafter):
    name = "bad-ids"
    description = "proposes ids outside the vocabulary"
    options = (Option("which", str, "negative", "what to propose"),)

    def draft(self, context, k):
        which = self.opts["which"]
        if which == "exit":
            import sys
            sys.exit(5)
        n = self.ctx.vocab_size
        ids = {"negative": [-1], "past": [n, n + 7], "huge": [2 ** 200], "float": [1.5]}[which]
        return Draft(tuple(ids[:k]))


class Plugin:
    __name__ = "bad_ids_drafter"

    @hookimpl
    def lab_register_drafters(self, register):
        register(BadIds)


plugin = Plugin()
'''


@pytest.mark.parametrize("ids,words", [([-1], "-1"), ([100, 5], "100"), ([2 ** 200], "2^200"), ([1.5], "1.5"),
                                       ([True], "True")])
def test_a_draft_outside_the_vocabulary_is_the_drafters_error(ids: list[object], words: str) -> None:
    from lab.kit.speculative import DraftRefused, checked_draft

    class Named:
        name = "bad-ids"

    with pytest.raises(DraftRefused) as info:
        checked_draft(Named(), ids, 100)
    assert "drafter bad-ids" in str(info.value) and words in str(info.value), info.value
    assert checked_draft(Named(), [0, 99], 100) == (0, 99)


def _stack_arm(stack: str) -> str:
    if stack == "llamacpp":
        try:
            import llama_cpp  # noqa: F401
        except Exception as exc:  # noqa: BLE001 - a wheel without its library raises FileNotFoundError
            pytest.skip(f"llama-cpp-python is not usable here: {exc}")
        return 'backend = "llamacpp"\nmodel = "embedded:smollm2"'
    pytest.importorskip("mlx.core", reason="MLX is not installed here (bash scripts/setup.sh mlx)")
    return 'backend = "mlx"\nmodel = "tiny:qwen3"'


@pytest.mark.engine
@pytest.mark.slow
@pytest.mark.parametrize("stack", ["llamacpp", "mlx"])
@pytest.mark.parametrize("which,words", [("negative", "-1"), ("past", "outside the vocabulary"), ("huge", "2^200"),
                                         ("exit", "SystemExit: a plugin called exit(5)")])
def test_out_of_vocabulary_draft_ids_fail_the_same_way_on_every_stack(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stack: str, which: str, words: str) -> None:
    import importlib

    site = tmp_path / "site"
    site.mkdir()
    name = f"bad_ids_{time.monotonic_ns()}"
    (site / f"{name}.py").write_text(BAD_DRAFTER_SRC)
    monkeypatch.syspath_prepend(str(site))
    module = importlib.import_module(name)
    from tests.fakes import fake_plugin

    reg = load_registry(extra_plugins=[fake_plugin, module.plugin])
    arm = _stack_arm(stack)
    text = f"""
[run]
max_tokens = 8
rounds = 1
warmup = 0
probe = false
threads = 1
[[prompts]]
name = "p"
text = "Write about tides."
[[arms]]
name = "good"
backend = "fake"
options = {{ virtual_clock = true }}
[[arms]]
name = "bad"
{arm}
drafter = "bad-ids"
n_max = 2
drafter_options = {{ which = "{which}" }}
"""
    profile = parse_profile(text, str(tmp_path / "p.toml"), reg)
    store = RunStore(profile, tmp_path / "runs")
    rows = {r.arm: dict(r) for r in Runner(profile, reg, store, [ReportWriter(store)]).run()}
    assert rows["good"]["status"] == "ok"
    bad = rows["bad"]
    assert bad["status"] == "error", bad
    if which != "exit":
        assert "drafter bad-ids proposed ids outside the vocabulary" in bad["detail"], bad
    assert words in bad["detail"], bad
    assert (store.path / "report.md").is_file()


@pytest.mark.slow
def test_a_plugin_report_past_its_budget_is_cut_and_results_json_stays_small(tmp_path: Path,
                                                                             hostile_module: Any) -> None:
    rows, run_dir = run_in_process(tmp_path, hostile_module, "huge-report")
    assert rows["bad"]["status"] == "ok"
    assert (run_dir / "results.json").stat().st_size < 8 << 20
    saved = json.loads((run_dir / "results.json").read_text())
    row = next(r for r in saved["results"] if r["arm"] == "bad")
    assert row["engine_report"]["kept"] == 7 and "blob" not in row["engine_report"]
    assert "blob (50,000,002 bytes)" in row["engine_report"]["report_cut"]
    assert "arm_blob" in saved["arm_reports"]["bad"]["report_cut"]


def test_a_report_that_cannot_be_written_is_an_error_exit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from lab.cli import main
    from lab.render import report as report_module
    from tests.fakes import BASE_AND_SPEC, fake_registry, profile_toml

    def refuse(*_a: Any, **_k: Any) -> Any:
        raise ValueError("results.json is past its cap")

    monkeypatch.setattr(report_module, "write_report", refuse)
    path = tmp_path / "p.toml"
    path.write_text(profile_toml(BASE_AND_SPEC) + "\n")
    rc = main(["run", "--quiet", "--out", str(tmp_path / "runs"), str(path)], registry=fake_registry())
    assert rc == 1
    assert "report.md not written" in capsys.readouterr().err
