"""A run's figures drawn in a process of their own, so that drawing can cost
the figures and never the report: matplotlib loads native libraries and a
font cache, and on a CUDA host its font manager died of SIGSEGV inside the
lab's process. The lab plans the figures (:func:`lab.render.figure_data.plan`,
plain data), a fresh interpreter draws them with
:func:`lab.render.figures.draw` one at a time and notes each as it goes,
and every figure it did not draw comes back named with the reason (a
crash, the time limit, no matplotlib). A fresh interpreter, never a fork of
the lab: the lab may hold engines and a GPU context.

    python -m lab.render.draw WORK_DIR LIMIT_S   (the drawing process; not a command for users)"""

from __future__ import annotations

import json
import math
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from lab.render import figure_data as fd
from lab.render import figures
from lab.render.figures import FIGURE_DIR, FORMATS, Drawn, Outcome

# How long drawing a run's figures may take, every process of it together.
# In a process of their own the demo run's seven figures (SVG and PNG) take
# 1.8-2.2 s on a 2-core CPU, 1.9-2.0 s with no font cache yet, and the
# committed run with the most steps (4,472) 2.9-3.3 s; a figure shows at
# most 8 panels, so a bigger run draws in about that too. Two minutes is far
# past any drawing that will finish, and short enough that a hung one is not
# taken for a hung lab (report.md and the summary are out before it starts).
LIMIT_S = 120.0
# The drawing process ends itself this long after its limit, should the lab
# be gone without stopping it and Python in it be stuck (a native hang).
SELF_STOP_GRACE_S = 10
LOG_FILE = "draw.log"
PLAN_FILE = "plan.pickle"
NOTES_FILE = "notes.jsonl"


def render(data: Mapping[str, Any], formats: Sequence[str] = FORMATS, log_to: Path | None = None) -> Outcome:
    """Every figure of a loaded run (:func:`lab.render.report.load_for_report`)."""
    return draw_apart(fd.plan(data), formats, log_to=log_to)


def render_compare(data_a: Mapping[str, Any], data_b: Mapping[str, Any], name_a: str = "A", name_b: str = "B",
                   formats: Sequence[str] = FORMATS) -> Outcome:
    return draw_apart(fd.plan_compare(data_a, data_b, name_a, name_b), formats)


def write(run_dir: str | Path, data: Mapping[str, Any], formats: Sequence[str] = FORMATS) -> Outcome:
    """Draw a run's figures into ``RUN_DIR/figures/`` (replacing those of an
    earlier rendering, removing those the run no longer has); the drawing
    process's output is kept there as draw.log when it did not end well."""
    where = Path(run_dir) / FIGURE_DIR
    if where.is_symlink():
        raise OSError(f"{where} is a symlink: figures are written inside the run directory only")
    where.mkdir(exist_ok=True)
    out = render(data, formats, log_to=where / LOG_FILE)
    keep = set()
    for d in out.drawn:
        for fmt, body in d.files.items():
            _replace(where / f"{d.name}.{fmt}")
            (where / f"{d.name}.{fmt}").write_bytes(body)
            keep.add(f"{d.name}.{fmt}")
    for name, *_ in fd.FIGURES:
        for fmt in FORMATS:
            stale = where / f"{name}.{fmt}"
            if stale.name not in keep and stale.is_file() and not stale.is_symlink():
                stale.unlink()
    return out


def _replace(path: Path) -> None:
    """Make room for a new file at ``path``: a symlink a saved run holds
    there is removed, never written through."""
    if path.is_symlink():
        path.unlink()


def draw_apart(planned: Sequence[fd.Planned], formats: Sequence[str] = FORMATS, limit_s: float | None = None,
               log_to: Path | None = None) -> Outcome:
    """Draw the planned figures in the drawing process, all of them within
    ``limit_s`` (default :data:`LIMIT_S`); those not drawn are left out
    with the reason. A process that dies while drawing a figure costs that
    figure: those after it are drawn by a fresh one. ``log_to``: where the
    processes' output is kept when one did not end well (removed there when
    all did)."""
    limit = LIMIT_S if limit_s is None else limit_s
    deadline = time.monotonic() + limit
    titles = {p.name: p.title for p in planned}
    pending = [p for p in planned if p.missing is None]
    why_not: dict[str, str] = {}
    stopped: str | None = None
    with tempfile.TemporaryDirectory(prefix="lab-figures-") as tmp:
        work = Path(tmp)
        notes = _notes(work / NOTES_FILE)
        while pending:
            (work / PLAN_FILE).write_bytes(pickle.dumps((pending, tuple(formats))))
            seen = len(notes["started"])
            left = max(deadline - time.monotonic(), 0.0)
            try:
                status = run_child([sys.executable, "-m", "lab.render.draw", str(work), str(left)], work / LOG_FILE, left)
                why = _why(status, limit, work / LOG_FILE)
            except OSError as exc:
                status, why = 1, f"the drawing process could not start ({exc.strerror or exc})"
            notes = _notes(work / NOTES_FILE)
            if why is None:
                break
            stopped = why
            done = {*notes["drawn"], *notes["left_out"]}
            began = [n for n in notes["started"][seen:] if n not in done]
            at = began[-1] if began else None
            if at is None:  # it never got to a figure: a fresh one would not either
                why_not.update((p.name, f"{why} before drawing any figure") for p in pending if p.name not in done)
                break
            why_not[at] = f"{why} while drawing it"
            pending = pending[[p.name for p in pending].index(at) + 1:]
            if status is None:  # the time is spent: the rest are not tried
                why_not.update((p.name, f"not reached ({why} while drawing {titles[at]})") for p in pending
                               if p.name not in done)
                break
        if log_to is not None:
            if stopped is not None and (work / LOG_FILE).is_file():
                _replace(log_to)
                shutil.copyfile(work / LOG_FILE, log_to)
                stopped += f"; its output is in {FIGURE_DIR}/{LOG_FILE}"
            elif log_to.is_file() and not log_to.is_symlink():
                log_to.unlink()  # an earlier rendering's: it no longer explains anything
        drawn, left_out = [], []
        for p in planned:
            note = notes["drawn"].get(p.name)
            if p.missing is not None:
                left_out.append(f"{p.title}: {p.missing}")
            elif note is not None:
                files = {fmt: (work / f"{p.name}.{fmt}").read_bytes() for fmt in note["formats"]}
                drawn.append(Drawn(p.name, p.title, p.section, files, tuple(note["notes"])))
            elif p.name in notes["left_out"]:
                left_out.append(notes["left_out"][p.name])
            else:
                left_out.append(f"{p.title}: "
                                + (why_not.get(p.name) or notes["stopped"] or "the drawing process ended without it"))
    return Outcome(tuple(drawn), tuple(left_out), notes["stopped"] or stopped)


def run_child(argv: Sequence[str], log: Path, limit_s: float) -> int | None:
    """Run the drawing process to its end or to ``limit_s``, its output in
    ``log``; its exit status, or None when it was stopped at the limit. It is
    a :class:`lab.kit.children.Child`: on every way out of here (the limit,
    Ctrl-C, SIGTERM raised as an exception) it is killed with its group at
    once (nothing in it is worth a grace) and reaped; its stdin is the lab's
    lifeline, so it also ends when the lab is killed outright."""
    from lab.kit.children import Child

    # no parent-death signal: it would kill the drawing process alone, before
    # its lifeline's watcher could end the group (what a figure's code started)
    child = Child(list(argv), name="the figures' drawing process", log_path=log, lifeline=True,
                  die_with_parent=False)
    timed_out = False
    try:
        child.wait(limit_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        child.stop(grace=0.0)
    return None if timed_out else child.returncode


def _why(status: int | None, limit_s: float, log: Path) -> str | None:
    """What ended the drawing process, when it did not end well."""
    if status == 0:
        return None
    if status is None:
        return f"the drawing process timed out after {limit_s:g} s and was stopped"
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return f"the drawing process died of {name}"
    said = [line for line in log.read_text(encoding="utf-8", errors="replace").splitlines()
            if line.strip() and not line.startswith(("$ ", "# lab: "))]
    return f"the drawing process exited with status {status}" + (f" ({said[-1].strip()[:200]})" if said else "")


def _notes(path: Path) -> dict[str, Any]:
    """What the drawing process noted: the figures it started, drew and
    left out, and what stopped it; a line cut short by a crash is skipped."""
    got: dict[str, Any] = {"started": [], "drawn": {}, "left_out": {}, "stopped": None}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return got
    for line in lines:
        try:
            note = json.loads(line)
        except ValueError:
            continue
        if "start" in note:
            got["started"].append(note["start"])
        elif "drawn" in note:
            got["drawn"][note["drawn"]] = note
        elif "left_out" in note:
            got["left_out"][note["left_out"]] = note["line"]
        elif "stopped" in note:
            got["stopped"] = note["stopped"]
    return got


# -- the drawing process -------------------------------------------------------------


def _end_with_the_lab(limit_s: float) -> None:
    """End this process, and what it started, when the lab is gone: its
    stdin reaches EOF when the lab closes or loses it, even killed
    outright. The alarm (left at its default, which ends the process in the
    kernel) bounds it where Python here cannot run any more."""
    signal.alarm(math.ceil(limit_s) + SELF_STOP_GRACE_S)

    def watch() -> None:
        # os.read on the descriptor: no lock of sys.stdin held at interpreter exit
        while os.read(0, 4096):
            pass
        if os.getpgrp() == os.getpid():  # a group of its own (run_child): what it started goes too
            os.killpg(os.getpgrp(), signal.SIGKILL)
        os._exit(3)

    threading.Thread(target=watch, name="lab-gone", daemon=True).start()


def main(argv: Sequence[str]) -> int:
    import faulthandler

    work, limit_s = Path(argv[0]), float(argv[1])
    faulthandler.enable()  # a native crash leaves its Python stack in the log
    _end_with_the_lab(limit_s)
    planned, formats = pickle.loads((work / PLAN_FILE).read_bytes())
    with open(work / NOTES_FILE, "a", encoding="utf-8") as out:

        def note(**what: Any) -> None:
            out.write(json.dumps(what) + "\n")
            out.flush()

        try:
            import matplotlib  # noqa: F401 - its absence is said once for every figure
        except ImportError as exc:
            note(stopped=f"matplotlib could not be imported ({exc}; `pip install matplotlib`)")
            return 0
        for p in planned:
            note(start=p.name)
            got = figures.draw([p], formats)
            for d in got.drawn:
                for fmt, body in d.files.items():
                    (work / f"{d.name}.{fmt}").write_bytes(body)
                note(drawn=d.name, formats=list(d.files), notes=list(d.notes))
            for line in got.left_out:
                note(left_out=p.name, line=line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
