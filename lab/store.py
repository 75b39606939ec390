"""Run directories: what a run measured, on disk as it is measured.

``runs/<timestamp>-<profile>/`` holds profile.toml (the source as run),
steps.jsonl (one line per speculative step, appended and flushed as it
happens), results.json (rewritten atomically after every cell) and report.md
(written by whoever wants it once the run ended: ``lab run``, the TUI,
``lab report``; see :func:`lab.report.write_report`). Engine logs and
lab.log go beside them.

The store is a listener of the run's events (:mod:`lab.run_events`): the
runner never calls it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Mapping

from lab.events import Finished, RunFinished, StepEvent
from lab.profiles import Profile
from lab.results import ResultRow
from lab.run_events import ArmReported, Logged, RunEvent, finished_row

SCHEMA_VERSION = 1


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "profile"


def write_json_atomic(path: Path, data: Any) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1, default=str)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


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


class RunStore:
    """Saves one run into a new run directory as its events arrive."""

    def __init__(self, profile: Profile, out: str | Path | None = None) -> None:
        root = Path(out) if out is not None else Path("runs")
        stamp = time.strftime("%Y%m%d-%H%M%S")
        base = root / f"{stamp}-{_slug(profile.name)}"
        path = base
        n = 1
        while path.exists():
            n += 1
            path = Path(f"{base}-{n}")
        path.mkdir(parents=True)
        self.path = path
        self.profile = profile
        (path / "profile.toml").write_text(profile.source, encoding="utf-8")
        self._steps: IO[str] = open(path / "steps.jsonl", "a", encoding="utf-8")
        # the rows as results.json holds them: what this store writes, not
        # a list anyone reads (the runner owns the rows)
        self._saved: list[dict[str, Any]] = []
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
            },
            "arm_reports": {},
        }
        self._write_results()

    def log_path(self, name: str) -> Path:
        return self.path / name

    def __call__(self, event: RunEvent) -> None:
        if isinstance(event, StepEvent):
            self.add_step(event)
        elif isinstance(event, Finished):
            self.add_result(finished_row(event))
        elif isinstance(event, ArmReported):
            self.set_arm_report(event.arm, event.report)
        elif isinstance(event, Logged):
            self.log(event.text)
        elif isinstance(event, RunFinished):
            self.finish(cancelled=event.cancelled)

    def add_step(self, event: StepEvent) -> None:
        if event.cell.is_warmup:
            return
        row = {
            "arm": event.cell.arm, "prompt": event.cell.prompt, "round": event.cell.round,
            "index": event.index, "drafted": event.drafted, "accepted": event.accepted,
            "landed": event.landed, "draft_s": event.draft_s, "verify_s": event.verify_s,
            "step_s": event.step_s, "measured": event.measured,
        }
        self._steps.write(json.dumps(row) + "\n")
        self._steps.flush()

    def add_result(self, row: ResultRow) -> None:
        self._saved.append(row.to_json())
        self._write_results()

    def set_arm_report(self, arm: str, report: Mapping[str, Any]) -> None:
        self.meta["arm_reports"][arm] = dict(report)
        self._write_results()

    def log(self, text: str) -> None:
        with open(self.log_path("lab.log"), "a", encoding="utf-8") as fh:
            fh.write(text.rstrip("\n") + "\n")

    def _write_results(self) -> None:
        data = {"profile": profile_summary(self.profile), **self.meta, "results": self._saved}
        write_json_atomic(self.path / "results.json", data)

    def finish(self, cancelled: bool = False) -> None:
        """The run ended: stamp it and close steps.jsonl."""
        self.meta["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self.meta["cancelled"] = cancelled
        self._write_results()
        if not self._steps.closed:
            self._steps.close()


def load_run(path: str | Path) -> dict[str, Any]:
    """Read a run directory's results.json (or the file itself)."""
    p = Path(path)
    if p.is_dir():
        p = p / "results.json"
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"{p}: no results.json here; is this a run directory?") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{p}: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or "results" not in data or "profile" not in data:
        raise ValueError(f"{p}: not a speclab results file (needs 'profile' and 'results')")
    return data


def load_steps(path: str | Path) -> list[dict[str, Any]]:
    p = Path(path)
    if p.is_dir():
        p = p / "steps.jsonl"
    out: list[dict[str, Any]] = []
    if not p.exists():
        return out
    for line in p.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                break  # a run killed mid-write leaves a torn last line
    return out
