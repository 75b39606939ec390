"""Run directories: what a run measured, on disk as it is measured.

``runs/<timestamp>-<profile>/`` holds profile.toml, steps.jsonl (appended
and flushed per step), results.json (rewritten atomically per cell), engine
logs and lab.log; report.md is written after the run. The store listens to
the run's events; the runner never calls it."""

from __future__ import annotations

import dataclasses
import errno
import os
import platform
import re
import shutil
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Callable, Mapping

from lab.base import events
from lab.base.machine import cpu_name, memory_bytes
from lab.base.profile import Profile
from lab.base.row import ResultRow
from lab.base.rundir import (
    LOG_FILE,
    PROFILE_FILE,
    RESULTS_FILE,
    STEPS_FILE,
    STORE_FILES,
    JsonFileError,
    read_bytes,
    read_saved,
    run_file,
)
from lab.base.strictjson import BoundedNumbers, FileRefused, dumps
from lab.base.textsafe import printable
from lab.rows.shape import check_run, check_step

SCHEMA_VERSION = 1
# the profile's part of a run directory's name: under 255 bytes, and typeable
MAX_NAME_CHARS = 60
# A file the run writes beside its own (an engine's log).
MAX_FILE_CHARS = 120


class StoreError(OSError):
    """A run directory that cannot be made or written: the message names the
    path and the reason, for the user."""


def _slug(name: str, limit: int, empty: str) -> str:
    """``name`` reduced to letters, digits and ``_.-``, at most ``limit``
    characters, never empty and never a path that climbs."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.")[:limit].rstrip("-.")
    return slug or empty


def _reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def _umask() -> int:
    # read once, at import, before any thread: setting it is the only way to read it
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# the mode open() gives under the umask, not mkstemp's private 0600
FILE_MODE = 0o666 & ~_umask()


def write_json_atomic(path: Path, data: Any) -> None:
    text = dumps(data, indent=1) + "\n"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def create_run_dir(root: str | Path, name: str) -> Path:
    """A new directory ``root/name`` (``name-2``, ``name-3``, ... when taken),
    made with one mkdir, so two runs starting in the same second never share
    or race for a directory. ``root`` is created when missing."""
    root = Path(root)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise StoreError(f"{root}: is a file, not a directory for runs") from None
    except OSError as exc:
        raise StoreError(f"{root}: cannot create the directory for runs ({_reason(exc)})") from None
    if not root.is_dir():
        raise StoreError(f"{root}: is not a directory")
    for n in range(1, 10_000):
        path = root / (name if n == 1 else f"{name}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise StoreError(f"{root}: cannot create a run directory in it ({_reason(exc)})") from None
        return path
    raise StoreError(f"{root}: 10,000 run directories named {name}-N already")


def profile_summary(profile: Profile) -> dict[str, Any]:
    return {
        "name": profile.name,
        "path": profile.path,
        "description": profile.description,
        "run": dataclasses.asdict(profile.run),
        "prompts": [dataclasses.asdict(p) for p in profile.prompts],
        "arms": [
            {**dataclasses.asdict(a), "options": dict(a.options), "drafter_options": dict(a.drafter_options), "sweep": dict(a.sweep)}
            for a in profile.arms
        ],
    }


# (directory that failed, the one now written or None for memory only, reason)
Moved = Callable[[Path, "Path | None", str], None]


class RunStore:
    """Saves one run into a new run directory as its events arrive. A
    directory that stops taking writes moves the run to a fallback under the
    system's temporary directory (``on_moved`` is told, :attr:`path`
    follows); failing that, the rows stay in memory."""

    def __init__(self, profile: Profile, out: str | Path | None = None, on_moved: Moved | None = None) -> None:
        root = Path(out) if out is not None else Path("runs")
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.profile = profile
        self.on_moved = on_moved
        self.path = create_run_dir(root, f"{stamp}-{_slug(profile.name, MAX_NAME_CHARS, 'profile')}")
        # where the run was meant to be, when it had to move
        self.moved_from: Path | None = None
        # True once no directory takes the run's files any more
        self.memory_only = False
        # the rows as results.json holds them: what this store writes, not
        # a list anyone reads (the runner owns the rows)
        self._saved: list[dict[str, Any]] = []
        # steps.jsonl lines flushed; a moving run reads them back from the open file
        self._steps_flushed = 0
        # a step whose write failed, and every step once only memory is left
        self._steps_pending: list[str] = []
        self._log_lines: list[str] = []
        # the running cells' rejected-draft offsets, saved with their steps
        self._drafts: dict[events.Cell, events.DraftMarks] = {}
        self.meta: dict[str, Any] = {
            "schema": SCHEMA_VERSION,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "finished": None,
            "cancelled": False,
            "machine": {
                "platform": platform.platform(),
                "machine": platform.machine(),
                "python": sys.version.split()[0],
                "cpu_count": os.cpu_count(),
                # what `lab report --compare` tells machines apart by
                "cpu": cpu_name(),
                "memory_bytes": memory_bytes(),
            },
            "arm_reports": {},
        }
        self._steps: IO[str] | None = None
        try:
            self._open(self.path, "")
        except OSError as exc:
            shutil.rmtree(self.path, ignore_errors=True)
            raise StoreError(f"{self.path}: cannot write the run directory ({_reason(exc)})") from None

    def _open(self, path: Path, steps_text: str) -> None:
        """Write everything kept so far into ``path`` and append from there."""
        (path / PROFILE_FILE).write_text(self.profile.source, encoding="utf-8")
        # read and write: a move reads the lines back through this descriptor
        steps = open(path / STEPS_FILE, "w+", encoding="utf-8")
        try:
            steps.write(steps_text)
            steps.flush()
            if self._log_lines:
                (path / LOG_FILE).write_text("".join(self._log_lines), encoding="utf-8")
            self._write_results_to(path)
        except BaseException:
            steps.close()
            raise
        self._steps = steps
        self._steps_flushed = steps_text.count("\n")
        self._steps_pending = []
        self._dir_id = _dir_id(path)

    def _guarded(self, write: Callable[[], None]) -> None:
        """Run one write; when the directory refuses it, move the run to a
        fallback directory (which gets everything kept so far)."""
        if self.memory_only:
            return
        try:
            if _dir_id(self.path) != self._dir_id:
                raise FileNotFoundError(errno.ENOENT, "the run directory was removed or replaced")
            write()
            return
        except OSError as exc:
            failed, reason = self.path, _reason(exc)
        steps_text = self._read_back_steps()
        self._close_steps()
        try:
            fallback = Path(tempfile.mkdtemp(prefix=f"speclab-{self.path.name[:80]}-"))
            self._open(fallback, steps_text)
        except OSError:
            self.memory_only = True
            self._steps_pending = steps_text.splitlines(keepends=True)
            self._tell(failed, None, reason)
            return
        _copy_logs(failed, fallback)
        self.moved_from = self.moved_from or failed
        self.path = fallback
        self._tell(failed, fallback, reason)

    def _tell(self, failed: Path, now: Path | None, reason: str) -> None:
        if self.on_moved is not None:
            self.on_moved(failed, now, reason)

    def _read_back_steps(self) -> str:
        """Every step line so far: those flushed to the open steps.jsonl,
        read through its descriptor (past Python's buffer, which a full disk
        leaves unwritable), then those whose write failed."""
        lines: list[str] = []
        if self._steps is not None and not self._steps.closed and self._steps_flushed:
            try:
                fd = self._steps.fileno()
                data = os.pread(fd, os.fstat(fd).st_size, 0).decode("utf-8", errors="replace")
                lines = data.splitlines(keepends=True)[: self._steps_flushed]
            except OSError:
                lines = []  # the file itself is gone from under us: its steps are lost
        return "".join(line if line.endswith("\n") else line + "\n" for line in lines) + "".join(self._steps_pending)

    def _close_steps(self) -> None:
        if self._steps is not None and not self._steps.closed:
            try:
                self._steps.close()
            except OSError:
                pass  # its lines were read back before it closed

    def log_path(self, name: str) -> Path:
        """A file for ``name`` inside the run directory: whatever made the
        name (an arm, a sweep value), it is reduced to letters, digits and
        ``_.-``, bounded, and cannot climb out."""
        return self.path / _slug(name, MAX_FILE_CHARS, "log")

    def __call__(self, event: events.RunEvent) -> None:
        if isinstance(event, events.StepEvent):
            self.add_step(event)
        elif isinstance(event, events.TokenEvent):
            if not event.cell.is_warmup:
                self._drafts.setdefault(event.cell, events.DraftMarks()).token(event)
        elif isinstance(event, events.StatusChanged):
            if event.status == events.Status.RUNNING:
                self._drafts.pop(event.cell, None)
        elif isinstance(event, events.Finished):
            self._drafts.pop(event.cell, None)
            self.add_result(events.finished_row(event))
        elif isinstance(event, events.ArmReported):
            self.set_arm_report(event.arm, event.report)
        elif isinstance(event, events.ReferenceMeasured) and event.done:
            self.meta["machine"].setdefault("references", {})[event.arm] = dict(event.record)
            self._write_results()
        elif isinstance(event, events.Logged):
            self.log(event.text)
        elif isinstance(event, events.RunStarted):
            self.meta["machine"]["lab_runs_before"] = event.runs_before
            if event.threads is not None:
                self.meta["machine"]["threads"] = dict(event.threads)
        elif isinstance(event, events.OrderPlanned):
            self.meta["order"] = {"order": event.order, "words": event.words, "groups": [dict(g) for g in event.groups]}
            self._write_results()
        elif isinstance(event, events.RoundAdded):
            self.meta.setdefault("order", {}).setdefault("added", []).append(
                {"round": event.round, "prompts": list(event.prompts), "why": event.why})
            self._write_results()
        elif isinstance(event, events.RunFinished):
            self.finish(cancelled=event.cancelled)

    def add_step(self, event: events.StepEvent) -> None:
        if event.cell.is_warmup:
            return
        record = event.record()
        at = self._drafts.setdefault(event.cell, events.DraftMarks()).step(event)
        if at is not None:
            record[events.REJECTED_AT] = at
        line = dumps(record) + "\n"
        if self.memory_only:
            self._steps_pending.append(line)
            return
        # an open file takes writes after its directory went: the directory
        # is checked once per cell, with results.json
        try:
            assert self._steps is not None
            self._steps.write(line)
            self._steps.flush()
            self._steps_flushed += 1
        except OSError:
            self._steps_pending.append(line)
            self._guarded(lambda: None)

    def add_result(self, row: ResultRow) -> None:
        self._saved.append(row.to_json())
        self._write_results()

    def set_arm_report(self, arm: str, report: Mapping[str, Any]) -> None:
        self.meta["arm_reports"][arm] = dict(report)
        self._write_results()

    def log(self, text: str) -> None:
        # lab.log is read in a terminal: a server's escape sequences are written escaped
        line = printable(text.rstrip("\n"), keep="\n\t") + "\n"
        self._log_lines.append(line)

        def write() -> None:
            with open(self.log_path(LOG_FILE), "a", encoding="utf-8") as fh:
                fh.write(line)

        self._guarded(write)

    def _write_results_to(self, path: Path) -> None:
        data = {"profile": profile_summary(self.profile), **self.meta, "results": self._saved}
        write_json_atomic(path / RESULTS_FILE, data)

    def _write_results(self) -> None:
        self._guarded(lambda: self._write_results_to(self.path))

    def finish(self, cancelled: bool = False) -> None:
        """The run ended: stamp it and close steps.jsonl."""
        self.meta["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self.meta["cancelled"] = cancelled
        self._write_results()
        self._close_steps()


def _copy_logs(failed: Path, fallback: Path) -> None:
    """Engine logs the failed directory still lets us read go with the run
    (a directory made read-only keeps them readable)."""
    try:
        names = [p for p in failed.iterdir() if p.is_file() and p.name not in STORE_FILES]
    except OSError:
        return
    for p in names:
        try:
            shutil.copy2(p, fallback / p.name)
        except OSError:
            pass  # a log is worth less than the run that goes on



def _dir_id(path: Path) -> tuple[int, int]:
    """Which directory ``path`` is: a run directory removed and made again,
    or replaced by a file, is not the one the run's open files are in."""
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, "the run directory was replaced by a file")
    return (st.st_dev, st.st_ino)


# far above what thousands of cells save, so a hostile file is never read whole
MAX_RESULTS_BYTES = 256 * 1024 * 1024
MAX_STEPS_BYTES = 1024 * 1024 * 1024


def load_run(path: str | Path) -> dict[str, Any]:
    """Read a run directory's results.json (or the file; either may be
    gzipped) in the shape :mod:`lab.rows.shape` gives; what does not fit is
    left out and named in ``data["unreadable"]``."""
    try:
        # older runs saved NaN and Infinity; they, and numbers no run saves, read as null
        p, data, seen = read_saved(path, RESULTS_FILE, MAX_RESULTS_BYTES, "results file")
    except JsonFileError as exc:
        if exc.kind == JsonFileError.MISSING:
            raise FileNotFoundError(f"{exc.path}: no results.json here; is this a run directory?") from None
        if exc.kind == JsonFileError.UNREADABLE:
            raise OSError(str(exc)) from None
        raise ValueError(str(exc)) from None
    data, problems = check_run(data, str(p))
    nonfinite = [str(x) for x in seen if x in ("NaN", "Infinity", "-Infinity")]
    if nonfinite:
        problems.add(str(p), f"{len(nonfinite)} non-finite numbers ({', '.join(sorted(set(nonfinite)))}) "
                     "read as null")
    beyond = [str(x) for x in seen if str(x) not in nonfinite]
    if beyond:
        problems.add(str(p), f"{len(beyond)} numbers out of range ({', '.join(sorted(set(beyond)))}) read as null")
    if problems:
        data["unreadable"] = list(problems)
    return data


def load_steps(path: str | Path, problems: list[str] | None = None) -> list[dict[str, Any]]:
    """steps.jsonl's (or steps.jsonl.gz's) records; a line that is not a step (torn by a kill, or
    damaged) is skipped and, with ``problems``, named there."""
    p = Path(path)
    out: list[dict[str, Any]] = []
    bad: list[str] = []
    nonfinite: list[str | int] = []
    try:
        p = run_file(p, STEPS_FILE) if p.is_dir() else p
        if not os.path.lexists(p) and not os.path.lexists(str(p) + ".gz"):
            return out
        text = read_bytes(p, MAX_STEPS_BYTES, "steps file").decode("utf-8", errors="replace")
    except FileRefused as exc:
        if problems is not None:
            problems.append(f"{p}: not read ({str(exc).removeprefix(f'{p}: ')})")
        return out
    except OSError as exc:
        if problems is not None:
            problems.append(f"{p}: unreadable ({exc.strerror or exc})")
        return out
    for lineno, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        try:
            record = BoundedNumbers(nonfinite, lineno).loads(line)
        except (ValueError, RecursionError):
            bad.append(f"line {lineno}: not JSON")
            continue
        why = check_step(record)
        if why:
            bad.append(f"line {lineno}: {why}")
            continue
        out.append(record)
    if bad and problems is not None:
        shown = "; ".join(bad[:5]) + (f"; and {len(bad) - 5} more" if len(bad) > 5 else "")
        problems.append(f"{p}: {len(bad)} lines skipped ({shown})")
    if nonfinite and problems is not None:
        problems.append(f"{p}: non-finite numbers read as null on {len(set(nonfinite))} lines")
    return out
