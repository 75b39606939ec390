"""Every arm runs in a process of its own (lab.arms.host; llama.cpp in
process here): a native crash there
(SIGSEGV, SIGABRT) costs that arm's remaining cells as crashed rows, the
other arms run, report.md is written and `lab run` exits 3; the run's
controls reach the child; Ctrl-C and SIGTERM to `lab run` during such an
arm, even in a load that does not answer SIGTERM, end the run within
seconds and leave no process behind; events arrive in the order the child
emitted them.

The crash comes from a real drafter plugin, installed by entry point as a
user's would be, that dies in native code (a NULL read, abort()) as an
engine's bad pointer or failed assert does."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from lab.base.events import ArmReported, Finished, Held, RunEvent, StatusChanged, StepEvent, TokenEvent
from lab.profile.load import parse_profile
from lab.registry import load_registry
from lab.render.report import ReportWriter
from lab.runner import RunControl, Runner
from lab.store import RunStore
from tests.hostile_gen import ROOT, _wait4
from tests.test_llamacpp_inprocess import PROMPTS

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[llamacpp]')")
pytestmark = pytest.mark.engine

CRASHING_SRC = '''
import ctypes, os, signal, time
from lab.api import Draft, Drafter, Option
from lab.hookspecs import hookimpl


class Crashing(Drafter):
    name = "crashing"
    description = "drafts nothing, then dies in native code on purpose"
    options = (Option("how", str, "segv", "segv: a NULL read; abort: abort(); hang-load: a load deaf to SIGTERM"),
               Option("at_cell", int, 2, "the cell (1 = the arm's first) in which it dies"))

    def load(self):
        self.cells = 0
        if self.opts["how"] == "hang-load":
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
            open(os.environ["CRASHING_LOADING"], "w").close()
            time.sleep(600)

    def begin(self, prompt_ids, cell):
        self.cells += 1

    def draft(self, context, k):
        if self.cells >= self.opts["at_cell"] and len(context) > 8:
            if self.opts["how"] == "segv":
                ctypes.string_at(0)
            os.abort()
        return Draft(())


@hookimpl
def lab_register_drafters(register):
    register(Crashing)
'''

RUN = "[run]\nmax_tokens = 16\nrounds = 1\nwarmup = 0\nn_ctx = 512\nprobe = false\n" + PROMPTS


def arm(name: str, drafter: str = "", options: str = "") -> str:
    text = f'[[arms]]\nname = "{name}"\nbackend = "llamacpp"\nmodel = "embedded:smollm2"\n'
    if drafter:
        text += f'drafter = "{drafter}"\nn_max = 4\n'
    if options:
        text += f"drafter_options = {{ {options} }}\n"
    return text


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The crashing drafter installed as an entry point, for this process and its children."""
    site = tmp_path / "site"
    info = site / "crashing_drafter-0.1.dist-info"
    info.mkdir(parents=True)
    (site / "crashing_drafter.py").write_text(CRASHING_SRC)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: crashing-drafter\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[lab.drafters]\ncrashing = crashing_drafter\n")
    path = os.pathsep.join([str(site), str(ROOT), str(ROOT / "plugins")])
    monkeypatch.setenv("PYTHONPATH", path)
    monkeypatch.setenv("CRASHING_LOADING", str(tmp_path / "loading"))
    monkeypatch.syspath_prepend(str(site))
    return site


def lab_run_command(tmp_path: Path, profile: str) -> list[str]:
    (tmp_path / "p.toml").write_text(profile)
    return [sys.executable, "-c", "import sys; from lab.cli import main; "
            "sys.argv = ['lab', 'run', '--quiet', '--out', 'runs', 'p.toml']; sys.exit(main())"]


def saved_rows(tmp_path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    saved = json.loads(next((tmp_path / "runs").glob("*/results.json")).read_text())
    return {(r["arm"], r["prompt"]): r for r in saved["results"]}


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_segfault_in_an_arm_costs_its_rows_only_and_lab_run_exits_3(tmp_path: Path, site: Path) -> None:
    profile = RUN + arm("base") + arm("crash", "crashing", 'how = "segv", at_cell = 2') + arm("after", "ngram")
    t0 = time.monotonic()
    rc, out, err, _rss = _wait4(lab_run_command(tmp_path, profile), tmp_path, 180)
    took = time.monotonic() - t0
    assert rc == 3, err[-3000:]
    rows = saved_rows(tmp_path)
    # the cell before the crash kept its row; the one it died in is crashed, named
    assert rows[("crash", "prose")]["status"] == "ok"
    crashed = rows[("crash", "code")]
    assert crashed["status"] == "crashed", crashed
    assert "the arm's process" in crashed["detail"] and "died of SIGSEGV" in crashed["detail"]
    # its last output: the child's Python stack as the fault handler wrote it
    assert "Segmentation fault" in crashed["detail"] and "crashing_drafter.py" in crashed["detail"]
    assert all(rows[(a, p)]["status"] == "ok" for a in ("base", "after") for p in ("prose", "code"))
    assert next((tmp_path / "runs").glob("*/report.md")).is_file()
    pid = int(re.search(r"\(pid (\d+)\)", crashed["detail"]).group(1))  # type: ignore[union-attr]
    assert gone(pid)
    assert took < 120, took


def arm_processes() -> list[psutil.Process]:
    """This process's arm processes, one that ended but is not reaped yet
    counted as gone, as a card tells it."""
    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and "lab.arms.host" in " ".join(p.cmdline()):
                found.append(p)
        except psutil.Error:
            continue
    return found


def test_an_abort_is_its_arms_crashed_rows_and_events_arrive_in_order(tmp_path: Path, site: Path) -> None:
    text = RUN + arm("base") + arm("crash", "crashing", 'how = "abort", at_cell = 1') + arm("after", "ngram")
    registry = load_registry()
    profile = parse_profile(text, str(tmp_path / "p.toml"), registry)
    store = RunStore(profile, tmp_path / "runs")
    events: list[Any] = []
    report = ReportWriter(store)
    rows = {(r.arm, r.prompt): r for r in Runner(profile, registry, store, [report, events.append]).run()}
    assert [rows[("crash", p)].status.value for p in ("prose", "code")] == ["crashed", "crashed"]
    assert "died of SIGABRT" in rows[("crash", "prose")].detail
    assert all(rows[(a, p)].status.value == "ok" for a in ("base", "after") for p in ("prose", "code"))
    assert (store.path / "report.md").is_file() and report.error is None
    # every isolated arm says where it ran, and its process is gone
    pids = [int(e.report["process"].split("pid ")[1].rstrip(")")) for e in events
            if isinstance(e, ArmReported) and "process" in e.report]
    assert len(set(pids)) == 2 and all(gone(p) for p in pids)
    assert not arm_processes()
    for cell in {e.cell for e in events if isinstance(e, Finished) and e.cell.arm == "after"}:
        mine = [e for e in events if isinstance(e, (StatusChanged, TokenEvent, StepEvent, Finished)) and e.cell == cell]
        assert isinstance(mine[0], StatusChanged) and isinstance(mine[-1], Finished)
        steps = [e.index for e in mine if isinstance(e, StepEvent)]
        assert steps == list(range(len(steps))) and steps
        timed = [e.t for e in mine if isinstance(e, (TokenEvent, StepEvent))]
        assert timed == sorted(timed)
        ids = [i for e in mine if isinstance(e, TokenEvent) for i in e.ids]
        assert len(ids) == rows[("after", cell.prompt)].n_tokens == 16


def test_pause_skip_and_cancel_reach_the_arms_process(tmp_path: Path) -> None:
    text = (RUN.replace("max_tokens = 16", "max_tokens = 48") + arm("paused", "ngram") + arm("skipped", "ngram")
            + arm("cancelled", "ngram") + arm("never", "ngram"))
    registry = load_registry()
    profile = parse_profile(text, str(tmp_path / "p.toml"), registry)
    control = RunControl()
    held: list[Held] = []
    seen: dict[str, int] = {}

    def listen(event: RunEvent) -> None:
        if isinstance(event, Held):
            held.append(event)
        if not isinstance(event, TokenEvent) or event.cell.prompt != "prose":
            return
        arm = event.cell.arm
        seen[arm] = seen.get(arm, 0) + 1
        if seen[arm] != 3:
            return
        if arm == "paused":
            control.pause()
            threading.Timer(0.5, control.resume).start()
        elif arm == "skipped":
            control.skip_arm()
        elif arm == "cancelled":
            control.cancel()

    rows = {(r.arm, r.prompt): r for r in Runner(profile, registry, None, [listen], control).run()}
    status = {k: r.status.value for k, r in rows.items()}
    assert status[("paused", "prose")] == status[("paused", "code")] == "ok"
    assert [h.in_cell for h in held] == [True, True] and held[1].seconds is not None and held[1].seconds >= 0.45
    assert rows[("paused", "prose")].engine_report["paused_s"] == held[1].seconds
    assert status[("skipped", "prose")] == status[("skipped", "code")] == "skipped"
    assert status[("cancelled", "prose")] == status[("cancelled", "code")] == "cancelled"
    assert status[("never", "prose")] == "cancelled" and "before this arm started" in rows[("never", "prose")].detail


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_to_lab_run_in_a_load_deaf_to_sigterm_ends_it_and_its_process(
        tmp_path: Path, site: Path, sig: int, code: int) -> None:
    profile = RUN + arm("stuck", "crashing", 'how = "hang-load"') + arm("later", "ngram")
    lab = subprocess.Popen(lab_run_command(tmp_path, profile), cwd=tmp_path, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, start_new_session=True, env={**os.environ, "PYTHONFAULTHANDLER": "1"},
                           # as from a terminal: a test process started in the background hands on SIGINT ignored
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    children: list[psutil.Process] = []
    try:
        end = time.monotonic() + 120
        while not (tmp_path / "loading").exists():
            assert lab.poll() is None and time.monotonic() < end, lab.stderr.read() if lab.stderr else ""
            time.sleep(0.05)
        # the arm's process
        children = [p for p in psutil.Process(lab.pid).children(recursive=True)
                    if "lab.arms.host" in " ".join(p.cmdline())]
        assert children
        t0 = time.monotonic()
        lab.send_signal(sig)
        try:
            rc = lab.wait(60)
        except subprocess.TimeoutExpired:
            lab.send_signal(signal.SIGABRT)  # its threads' stacks (faulthandler) say where it is stuck
            pytest.fail(f"lab run did not end 60 s after signal {sig}:\n{lab.communicate(timeout=30)[1].decode()[-8000:]}")
        took = time.monotonic() - t0
    finally:
        for p in [lab, *children]:  # only what this test started, by pid
            if not gone(p.pid):
                os.kill(p.pid, signal.SIGKILL)
    assert rc == code
    assert took < 15, took
    end = time.monotonic() + 5
    while not all(gone(p.pid) for p in children) and time.monotonic() < end:
        time.sleep(0.05)
    assert all(gone(p.pid) for p in children)
    rows = saved_rows(tmp_path)
    assert {r["status"] for r in rows.values()} == {"cancelled"}


def test_gpu_figures_of_an_arm_in_its_own_process_are_its_processes(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """GPU telemetry stays in the run's process: the arm's device memory is
    its child's (the card here reports 1 GiB for each arm process, none
    for the run's process), and each row's energy is computed
    over the child's generation window (100 W, a counter of 100 J/s)."""
    from lab.base.cells import now
    from lab.telemetry.gpu import GpuSample, RunTelemetry

    class Card:
        source = "test"

        def read(self) -> list[GpuSample]:
            t = now()
            held = {p.pid: 1 << 30 for p in arm_processes()}
            return [GpuSample(t, 0, "test card", 2 << 30, 80 << 30, 50.0, 100.0, 100.0 * t, held)]

        def close(self) -> None:
            return None

    monkeypatch.setattr(RunTelemetry, "open", classmethod(lambda cls, emit=None: cls(Card(), 0.02, emit).start()))
    text = RUN.replace("max_tokens = 16", "max_tokens = 32") + arm("base")
    registry = load_registry()
    rows = Runner(parse_profile(text, str(tmp_path / "p.toml"), registry), registry).run()
    for row in rows:
        assert row.status.value == "ok" and row.gpu_name == "test card"
        assert row.gpu_peak_mem_bytes == 1 << 30 and row.gpu_card_peak_bytes == 2 << 30
        assert row["gpu_energy_j"] == pytest.approx(100.0 * row["gen_s"], rel=0.25)
        assert row["energy_per_token_j"] == pytest.approx(row["gpu_energy_j"] / row["n_tokens"])


def test_a_failing_card_reading_as_a_row_ends_is_skipped_not_the_run() -> None:
    """A row's last GPU reading may fail (a card reader asking about an arm
    process that has ended but is not reaped yet): the row gets the readings
    taken before it; the error does not escape."""
    from lab.base.cells import now
    from lab.telemetry.gpu import GpuSample, RunTelemetry

    reads: list[float] = []

    class Card:
        source = "test"

        def read(self) -> list[GpuSample]:
            if reads:
                raise psutil.ZombieProcess(os.getpid())
            reads.append(now())
            return [GpuSample(reads[0], 0, "test card", 2 << 30, 80 << 30, 50.0, 100.0, 0.0, {os.getpid(): 1 << 30})]

        def close(self) -> None:
            return None

    telemetry = RunTelemetry(Card(), 60.0)
    telemetry.begin_arm("base", list)
    telemetry.start()
    try:
        keys = telemetry.cell_keys("base", "prose", 0)
    finally:
        telemetry.stop()
    assert keys["gpu_name"] == "test card" and keys["gpu_peak_mem_bytes"] == 1 << 30
