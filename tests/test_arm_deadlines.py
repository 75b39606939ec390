"""An arm's plugin calls have deadlines its process enforces
(lab.arms.handles): a drafter whose ``draft()`` never returns and a backend
whose ``load`` never returns each end as error rows that name the call, the
deadline and the frame it hung in; the other arms run, report.md is written,
and nothing the hung arm started survives it.

And the arm's own process loads its engine before anything of the lab's:
with numpy and Intel's OpenMP runtime loaded in the lab's process first (as a
CUDA host's Python brings them), the arm's process still opens llama.cpp's
libraries before numpy, and its rows are ``ok``. The crash that order
caused on a CUDA image (a ggml CPU backend after another OpenMP runtime) did
not reproduce on this machine's CPU build with either runtime loaded first,
so the test watches the order itself, with an audit hook in every process
of the run; the GPU check (scripts/device/, results/gpu-check/) runs the
real thing where it crashed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.hostile_gen import ROOT
from tests.test_llamacpp_inprocess import PROMPTS

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[llamacpp]')")
pytestmark = pytest.mark.engine

HUNG_SRC = '''
import os, time
from lab.api import Backend, Draft, Drafter, Generation, Option
from lab.base.events import TokenEvent
from lab.hookspecs import hookimpl


class Sleepy(Drafter):
    name = "sleepy"
    description = "drafts, then one draft() that never returns"
    options = (Option("spin", bool, False, "spin on the CPU instead of sleeping"),)

    def begin(self, prompt_ids, cell):
        self.steps = 0

    def draft(self, context, k):
        self.steps += 1
        if self.steps > 2:
            open(os.environ["HUNG_MARK"], "a").close()
            while True:
                if not self.opts["spin"]:
                    time.sleep(3600)
        return Draft(())


class Stuck(Backend):
    name = "stuck"
    stack = "stuck"
    description = "a backend whose load, generate or close never returns; it starts a helper process first"
    options = (Option("hang", str, "load", "the call that never returns: load, generate or close"),)

    def load(self, emit):
        import subprocess
        helper = subprocess.Popen(["sleep", "3600"])
        open(os.environ["HUNG_HELPER"], "w").write(str(helper.pid))
        if self.opts["hang"] == "load":
            time.sleep(3600)

    def generate(self, request, emit, cancelled):
        if self.opts["hang"] == "generate":
            time.sleep(3600)
        emit(TokenEvent(request.cell, "x" * request.max_tokens, tuple([1] * request.max_tokens), False))
        return Generation(ids=[1] * request.max_tokens, text="x" * request.max_tokens, gen_s=0.01, prompt_tokens=1,
                          prompt_s=0.01)

    def close(self):
        if self.opts["hang"] == "close":
            time.sleep(3600)


@hookimpl
def lab_register_drafters(register):
    register(Sleepy)


@hookimpl
def lab_register_backends(register):
    register(Stuck)
'''

RUN = "[run]\nmax_tokens = 24\nrounds = 1\nwarmup = 0\nn_ctx = 512\nprobe = false\n" + PROMPTS


def arm(name: str, drafter: str = "", extra: str = "", backend: str = "llamacpp") -> str:
    text = f'[[arms]]\nname = "{name}"\nbackend = "{backend}"\n'
    if backend == "llamacpp":
        text += 'model = "embedded:smollm2"\n'
    if drafter:
        text += f'drafter = "{drafter}"\nn_max = 4\n'
    return text + extra


def installed(site: Path, name: str, src: str, entry_points: str) -> Path:
    """A module ``name`` written into ``site`` with a dist-info naming its
    entry points, as pip would leave it; ``site`` returned."""
    info = site / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (site / f"{name}.py").write_text(src)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)
    return site


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The hung plugins installed by entry point, for this process and its children."""
    site = installed(tmp_path / "site", "hung_plugins", HUNG_SRC,
                     "[lab.drafters]\nhung = hung_plugins\n[lab.backends]\nhung = hung_plugins\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(ROOT), str(ROOT / "plugins")]))
    monkeypatch.setenv("HUNG_MARK", str(tmp_path / "hung"))
    monkeypatch.setenv("HUNG_HELPER", str(tmp_path / "helper.pid"))
    return site


def lab_run(tmp_path: Path, profile: str, prelude: str = "", timeout: float = 240) -> tuple[int, str, float]:
    (tmp_path / "p.toml").write_text(profile)
    code = (prelude + "import sys\nfrom lab.cli import main\n"
            "sys.exit(main(['run', '--quiet', '--out', 'runs', 'p.toml']))\n")
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=timeout)
    return out.returncode, out.stderr, time.monotonic() - t0


def saved_rows(tmp_path: Path) -> dict[str, dict[str, Any]]:
    saved = json.loads(next((tmp_path / "runs").glob("*/results.json")).read_text())
    return {f'{r["arm"]}/{r["prompt"]}': r for r in saved["results"]}


@pytest.mark.parametrize("spin", [False, True], ids=["sleeps", "spins"])
def test_a_draft_that_never_returns_is_an_error_row_naming_draft(tmp_path: Path, site: Path, spin: bool) -> None:
    profile = RUN + arm("base") + arm("hung", "sleepy", f"drafter_options = {{ spin = {str(spin).lower()} }}\n"
                                      "deadlines = { generate = 3 }\n") + arm("after", "ngram")
    rc, err, took = lab_run(tmp_path, profile)
    rows = saved_rows(tmp_path)
    hung = rows["hung/prose"]
    assert hung["status"] == "error", hung
    assert "generate() hung" in hung["detail"] and "3 s" in hung["detail"], hung["detail"]
    assert "It was in draft()" in hung["detail"] and "hung_plugins.py" in hung["detail"], hung["detail"]
    assert "deadlines = { generate = SECONDS }" in hung["detail"]
    # its later cell does not run; the other arms do, beside it
    assert rows["hung/code"]["status"] == "error" and "not run" in rows["hung/code"]["detail"]
    assert all(rows[f"{a}/{p}"]["status"] == "ok" for a in ("base", "after") for p in ("prose", "code"))
    assert (next((tmp_path / "runs").glob("*")) / "report.md").is_file()
    assert rc == 3, err[-3000:]
    # bounded: each hang costs its deadline, the stacks and a grace, not the 3600 s sleep
    assert took < 150, took


@pytest.mark.parametrize("call", ["load", "generate", "close"])
def test_a_backend_call_that_never_returns_ends_clean(tmp_path: Path, site: Path, call: str) -> None:
    deadlines = f"deadlines = {{ {call} = 2 }}\n"
    profile = RUN + arm("stuck", backend="stuck", extra=f'options = {{ hang = "{call}" }}\n' + deadlines) + arm("base")
    rc, err, took = lab_run(tmp_path, profile)
    rows = saved_rows(tmp_path)
    if call == "close":
        # its rows stand; the arm's report names the close that hung
        assert rows["stuck/prose"]["status"] == rows["stuck/code"]["status"] == "ok"
        saved = json.loads(next((tmp_path / "runs").glob("*/results.json")).read_text())
        errors = saved["arm_reports"]["stuck"]["left_behind"]["close_errors"]
        assert any("close() hung" in e and "2 s" in e and "It was in close()" in e for e in errors), errors
        assert rc == 0, err[-3000:]
    else:
        name = "load" if call == "load" else "generate"
        first = rows["stuck/prose"]
        assert first["status"] == "error", first
        assert f"{name}() hung" in first["detail"] and "2 s" in first["detail"], first["detail"]
        assert f"It was in {call}()" in first["detail"], first["detail"]
        assert rows["stuck/code"]["status"] == "error"
        assert rc == 3, err[-3000:]
    assert rows["base/prose"]["status"] == rows["base/code"]["status"] == "ok"
    assert (next((tmp_path / "runs").glob("*")) / "report.md").is_file()
    helper = int((tmp_path / "helper.pid").read_text())
    assert not psutil.pid_exists(helper) or psutil.Process(helper).status() == psutil.STATUS_ZOMBIE
    assert took < 120, took


LOOSE_SRC = '''
import os, subprocess
from lab.hookspecs import hookimpl

# started as the module imports, in the lab's process and in every arm's
_p = subprocess.Popen(["sleep", "3600"], start_new_session=True)
with open(os.environ["LOOSE_PIDS"], "a") as fh:
    fh.write(f"{_p.pid}\\n")


@hookimpl
def lab_register_drafters(register):
    pass
'''

EXITING_SRC = '''
import os
os._exit(4)
'''


def test_what_plugins_start_at_import_ends_with_the_lab_and_an_exit_at_import_is_named(tmp_path: Path,
                                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    for name, src, group in (("loose_plugin", LOOSE_SRC, "lab.drafters"), ("exiting_plugin", EXITING_SRC, "lab.drafters")):
        installed(site, name, src, f"[{group}]\n{name} = {name}\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(ROOT), str(ROOT / "plugins")]))
    pids = tmp_path / "loose.pids"
    monkeypatch.setenv("LOOSE_PIDS", str(pids))
    (tmp_path / "p.toml").write_text(RUN + arm("base"))
    # the program entry, as the `lab` script and `python -m lab` start it
    out = subprocess.run([sys.executable, "-m", "lab", "run", "--quiet", "--out", "runs", "p.toml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "plugins not loaded: exiting_plugin" in out.stderr, out.stderr[-3000:]
    started = [int(x) for x in pids.read_text().split()]
    # one from the lab's process, one from the arm's
    assert len(started) == 2, started
    end = time.monotonic() + 5
    while any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in started):
        assert time.monotonic() < end, [p for p in started if psutil.pid_exists(p)]
        time.sleep(0.05)
    said = subprocess.run([sys.executable, "-m", "lab", "plugins"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert "exiting_plugin" in said.stdout + said.stderr and "os._exit(4)" in said.stdout + said.stderr


SLOW_SRC = '''
import os, time
open(os.environ["SLOW_MARK"], "w").write(str(os.getpid()))
time.sleep(300)
'''


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_a_plugin_imports_ends_the_lab_not_the_plugin(tmp_path: Path, sig: int) -> None:
    """A plugin's failure at import is a load error, but a SIGTERM or Ctrl-C
    that arrives while it imports is the user's: the lab ends (143 / 130),
    the signal never swallowed as that plugin's error."""
    site = installed(tmp_path / "site", "slow_plugin", SLOW_SRC, "[lab.drafters]\nslow_plugin = slow_plugin\n")
    mark = tmp_path / "importing"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT), str(ROOT / "plugins")]),
           "SLOW_MARK": str(mark)}
    (tmp_path / "p.toml").write_text(RUN + arm("base"))
    proc = subprocess.Popen([sys.executable, "-m", "lab", "run", "--quiet", "--out", "runs", "p.toml"], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 120
        while not mark.exists():
            assert proc.poll() is None and time.monotonic() < end, "the plugin's import never began"
            time.sleep(0.05)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == (143 if sig == signal.SIGTERM else 130), err[-3000:]
    assert "plugins not loaded: slow_plugin" not in err, err[-3000:]


WATCH = '''
import json, os, sys
_log = os.environ["DLOPEN_LOG"]
def _hook(event, args):
    if event == "ctypes.dlopen" and any(k in str(args[0]) for k in ("llama", "ggml", "iomp")):
        with open(_log, "a") as fh:
            fh.write(json.dumps({"pid": os.getpid(), "argv": sys.argv, "lib": str(args[0]),
                                 "numpy": "numpy" in sys.modules}) + "\\n")
sys.addaudithook(_hook)
'''


def test_the_arms_process_loads_llama_before_numpy_whatever_the_lab_loaded(tmp_path: Path) -> None:
    watch = tmp_path / "watch"
    watch.mkdir()
    (watch / "sitecustomize.py").write_text(WATCH)
    log = tmp_path / "dlopen.jsonl"
    iomp = Path(sys.prefix) / "lib" / "libiomp5.so"
    prelude = (f"import ctypes\nctypes.CDLL({str(iomp)!r}, mode=ctypes.RTLD_GLOBAL)\n" if iomp.exists() else "")
    prelude += "import numpy\n"
    env = {"PYTHONPATH": os.pathsep.join([str(watch), str(ROOT), str(ROOT / "plugins")]), "DLOPEN_LOG": str(log)}
    profile = RUN + arm("base") + arm("ngram", "ngram")
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        rc, err, _ = lab_run(tmp_path, profile, prelude)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert rc == 0, err[-3000:]
    rows = saved_rows(tmp_path)
    assert {r["status"] for r in rows.values()} == {"ok"}
    seen = [json.loads(line) for line in log.read_text().splitlines()]
    arms = {}
    for s in seen:
        if s["argv"][0].endswith("host.py") and ("llama" in s["lib"] or "ggml" in s["lib"]):
            arms.setdefault(s["pid"], s)
    assert len(arms) == 2, seen
    # each arm's process: llama.cpp's first library opened before numpy was imported
    assert all(first["numpy"] is False for first in arms.values()), arms
    # and the lab's own process opened no engine at all
    lab_pids = {s["pid"] for s in seen if not s["argv"][0].endswith("host.py") and s["argv"][:1] != ["-c"]
                and ("llama" in s["lib"] or "ggml" in s["lib"])}
    assert not lab_pids, [s for s in seen if s["pid"] in lab_pids]
