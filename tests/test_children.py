"""The supervisor's contract (lab.kit.children), once, and that every kind of
process the lab starts goes through it: a child that ends when asked, one
that ignores SIGTERM, one that leaves a grandchild in its group, one whose
grandchild starts a session of its own; each ended and reaped, its output
kept. The lab's own exit ends whatever a plugin started and abandoned
(the lab is the subreaper of its orphans), and Ctrl-C / SIGTERM to a lab
with children leaves none."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from lab.kit.children import Child, adopt_orphans, descendants, end_descendants

PY = sys.executable


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_for(path: Path, child: Child, timeout: float = 30.0) -> str:
    end = time.monotonic() + timeout
    while not path.exists() or not path.read_text().strip():
        assert child.alive(), child.death()
        assert time.monotonic() < end, f"{path} never written"
        time.sleep(0.02)
    return path.read_text()


def script(body: str) -> list[str]:
    return [PY, "-c", textwrap.dedent(body)]


def test_a_child_asked_to_end_ends_and_its_output_is_kept(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    child = Child(script(f"""
        import signal, sys, time
        def bye(*_): print("asked to end", flush=True); sys.exit(0)
        signal.signal(signal.SIGTERM, bye)
        print("hello", flush=True); open({str(ready)!r}, "w").write("1")
        time.sleep(600)
    """), name="polite")
    wait_for(ready, child)
    t0 = time.monotonic()
    assert child.stop(grace=5) == 0
    assert time.monotonic() - t0 < 3
    assert "hello" in child.output and "asked to end" in child.output
    assert gone(child.pid) and "exited with status 0" in child.death()


def test_a_child_that_ignores_sigterm_is_killed_after_its_grace(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    child = Child(script(f"""
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open({str(ready)!r}, "w").write("1")
        time.sleep(600)
    """), name="deaf")
    wait_for(ready, child)
    t0 = time.monotonic()
    code = child.stop(grace=1.0)
    took = time.monotonic() - t0
    assert code == -signal.SIGKILL and 0.9 < took < 5, (code, took)
    assert "died of SIGKILL" in child.death()


def test_a_grandchild_in_the_group_and_one_in_its_own_session_both_end(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    child = Child(script(f"""
        import os, subprocess, sys, time
        same = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        away = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
        open({str(pids)!r}, "w").write(f"{{same.pid}} {{away.pid}}")
        time.sleep(600)
    """), name="parent")
    same, away = (int(p) for p in wait_for(pids, child).split())
    assert os.getpgid(away) != os.getpgid(same)
    child.stop(grace=2)
    end = time.monotonic() + 5
    while not (gone(same) and gone(away)) and time.monotonic() < end:
        time.sleep(0.05)
    assert gone(child.pid) and gone(same) and gone(away)


def test_a_native_crash_is_told_with_its_stack(tmp_path: Path) -> None:
    child = Child(script("""
        import ctypes, faulthandler
        faulthandler.enable()
        def inner():
            ctypes.string_at(0)
        inner()
    """), name="crasher")
    child.wait(30)
    child.stop()
    said = child.death()
    assert "died of SIGSEGV" in said and "Fatal Python error" in said and "inner" in said


def test_the_lab_ends_what_a_plugin_abandoned(tmp_path: Path) -> None:
    """A process whose parent is gone is re-parented to the lab (a subreaper),
    so the lab's exit still finds and ends it."""
    pid_file = tmp_path / "orphan"
    code = textwrap.dedent(f"""
        import subprocess, sys, time
        from lab.kit.children import adopt_orphans, end_descendants, descendants
        assert adopt_orphans()
        # a middle process that starts a sleeper and exits at once: the sleeper is orphaned
        subprocess.run([sys.executable, "-c",
                        "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'],"
                        " start_new_session=True); open({str(pid_file)!r}, 'w').write(str(p.pid))"])
        orphan = int(open({str(pid_file)!r}).read())
        assert orphan in descendants(), (orphan, descendants())
        ended = end_descendants(grace=2)
        assert [e["pid"] for e in ended] == [orphan], ended
        print("OK")
    """)
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-3000:]
    orphan = int(pid_file.read_text())
    assert gone(orphan)


def test_adopting_orphans_is_possible_here() -> None:
    # the case above relies on it; a platform without it says so here, plainly
    if not sys.platform.startswith("linux"):
        pytest.skip("hardware: the subreaper is Linux's")
    out = subprocess.run([PY, "-c", "from lab.kit.children import adopt_orphans; print(adopt_orphans())"],
                         capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == "True"
    assert callable(adopt_orphans) and callable(descendants) and callable(end_descendants)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_to_a_lab_with_children_leaves_none(tmp_path: Path, sig: int) -> None:
    """The lab's program entry: a child started through the supervisor and a
    process a plugin started and abandoned both end with the lab."""
    ready = tmp_path / "ready"
    code = textwrap.dedent(f"""
        import subprocess, sys, time
        from lab.cli import program
        from lab.kit.children import Child
        def command(argv):
            c = Child([sys.executable, "-c", "import time; time.sleep(600)"], name="held")
            loose = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
            open({str(ready)!r}, "w").write(f"{{c.pid}} {{loose.pid}}")
            time.sleep(600)
        sys.exit(program(command))
    """)
    lab = subprocess.Popen([PY, "-c", code], start_new_session=True, stderr=subprocess.PIPE,
                           env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        end = time.monotonic() + 60
        while not ready.exists() or len(ready.read_text().split()) < 2:
            assert lab.poll() is None and time.monotonic() < end, lab.stderr.read() if lab.stderr else b""
            time.sleep(0.05)
        held, loose = (int(p) for p in ready.read_text().split())
        lab.send_signal(sig)
        lab.wait(30)
        end = time.monotonic() + 5
        while not (gone(held) and gone(loose)) and time.monotonic() < end:
            time.sleep(0.05)
        assert gone(held) and gone(loose)
    finally:
        if lab.poll() is None:
            lab.kill()
            lab.wait()


def test_every_kind_of_child_is_supervised() -> None:
    """The arm's process, the probe's, a server and a figure process are all
    started as a Child (read from the source: one way to start and stop)."""
    root = Path(__file__).resolve().parents[1]
    for module in ("lab/arms/handles.py", "lab/probing/isolated.py", "lab/kit/server/process.py", "lab/render/draw.py"):
        text = (root / module).read_text()
        assert "Child(" in text, module
        assert "subprocess.Popen(" not in text, module
