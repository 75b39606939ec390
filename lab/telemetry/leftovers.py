"""What an arm's plugins left running once the arm closed: processes the
lab did not have before the arm (ended here, each with its process group
where it leads one) and threads that would keep the lab alive (named; the
CLI ends the process when a run is done, see :func:`lingering_threads`).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from lab.kit.children import end_processes

# How long a leftover process has after SIGTERM before SIGKILL.
TERM_GRACE_S = 3.0
# a process seen twice this far apart is no short-lived helper
SECOND_LOOK_S = 0.3
# Names kept in a report.
MAX_NAMED = 20


def _descendants() -> dict[int, tuple[float, int]]:
    """pid -> (start time, parent pid) of every process below this one."""
    try:
        import psutil

        out: dict[int, tuple[float, int]] = {}
        for p in psutil.Process().children(recursive=True):
            try:
                out[p.pid] = (p.create_time(), p.ppid())
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return out
    except Exception:  # noqa: BLE001 - no process table to read: nothing is ended
        return {}


@dataclass
class Leftovers:
    processes: dict[int, tuple[float, int]] = field(default_factory=dict)
    threads: set[int] = field(default_factory=set)

    @classmethod
    def before_arm(cls) -> Leftovers:
        return cls(_descendants(), {t.ident or 0 for t in threading.enumerate()})

    def after_arm(self) -> dict[str, Any]:
        """End the processes started since :meth:`before_arm` that still run,
        and name the live non-daemon threads started since; {} when none."""
        out: dict[str, Any] = {}
        new = self._new_processes()
        if new:
            time.sleep(SECOND_LOOK_S)
            again = self._new_processes()
            new = {pid: t for pid, t in new.items() if again.get(pid) == t}
        if new:
            out["processes_ended"] = end_processes(sorted(new), TERM_GRACE_S)[:MAX_NAMED]
        threads = [t.name for t in threading.enumerate()
                   if t.ident not in self.threads and t.is_alive() and not t.daemon]
        if threads:
            out["threads_left"] = threads[:MAX_NAMED]
        return out

    def _new_processes(self) -> dict[int, tuple[float, int]]:
        """Processes started since :meth:`before_arm` whose every ancestor
        below the lab is new too: a child that a process older than the arm
        spawned (a server's own workers, one a caller started) is not the
        arm's to end."""
        now = _descendants()
        new = {pid: seen for pid, seen in now.items() if self.processes.get(pid) != seen}
        own = os.getpid()
        kept: dict[int, tuple[float, int]] = {}
        grew = True
        while grew:
            grew = False
            for pid, seen in new.items():
                if pid not in kept and (seen[1] == own or seen[1] in kept):
                    kept[pid] = seen
                    grew = True
        return kept

    @staticmethod
    def line(left: Mapping[str, Any]) -> str:
        """One line for the log and the report (of a saved run too, so
        nothing in ``left`` is trusted to have its shape)."""
        def items(key: str) -> list[Any]:
            value = left.get(key)
            return list(value)[:MAX_NAMED] if isinstance(value, list) else []

        parts = []
        procs = [f"{p.get('pid')} ({p.get('name')})" if isinstance(p, Mapping) else str(p)
                 for p in items("processes_ended")]
        if procs:
            parts.append("ended processes it left running: " + ", ".join(procs))
        threads = [str(t) for t in items("threads_left")]
        if threads:
            parts.append("threads still running when it closed (the lab does not wait for them): " + ", ".join(threads))
        parts.extend(str(e) for e in items("close_errors"))
        return "; ".join(parts)


def lingering_threads() -> list[threading.Thread]:
    """Live non-daemon threads besides the main one: at interpreter exit
    Python would wait for each of them, for ever if it never ends."""
    main = threading.main_thread()
    return [t for t in threading.enumerate() if t is not main and t.is_alive() and not t.daemon]
