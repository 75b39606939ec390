"""Was the machine busy while a cell ran? The noise guard.

A watcher reads the machine's CPU time less this process tree's. A cell
whose other processes used more than the engine left spare by over
:data:`BUSY_CORES`, or that throttled, is contended; counters are cumulative,
so the read rate does not matter."""

from __future__ import annotations

import glob
import os
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

from lab.base.periodic import PeriodicSampler

# others' busy cores beyond the engine's spare ones that make a cell contended
BUSY_CORES = 0.5
INTERVAL_S = 0.25
# this tree's threads waiting for a core, in cores, past which a thread count is suggested
STARVED_CORES = 0.5
# that wait as a share of this tree's busy cores: contended even under BUSY_CORES
STARVED_SHARE = 0.25
# Other processes' busy cores of an idle background (system daemons).
QUIET_CORES = 0.1
# CPU time comes in 10 ms ticks: a shorter cell is read over the arm's last
# MIN_WINDOW_S seconds, and a window under MIN_JUDGED_S is not judged.
MIN_WINDOW_S = 1.0
MIN_JUDGED_S = 0.2


@dataclass(frozen=True)
class Contention:
    """One cell's reading."""

    others_cores: float  # other processes' mean busy cores over the cell
    spare_cores: float  # cores the arm's engine leaves free
    seconds: float
    waiting_cores: float | None = None  # this tree's threads waiting for a core (mean), where readable
    min_freq_ratio: float | None = None  # lowest CPU clock over its maximum, where readable
    throttled: bool = False  # thermal throttling events during the cell, where readable
    own_cores: float = 0.0  # this process tree's mean busy cores (the lab, its engine, its server)
    cores: int = 0  # the machine's cores (0: not recorded)

    @property
    def contended(self) -> bool:
        if self.seconds < MIN_JUDGED_S:
            return self.throttled
        if self.throttled or self.others_cores > self.spare_cores + BUSY_CORES:
            return True
        # others under the limit while this tree's threads queue for a core slow it as much
        if self.others_cores <= BUSY_CORES or self.waiting_cores is None:
            return False
        limit = STARVED_SHARE * self.own_cores if self.own_cores > 0 else STARVED_CORES
        return self.waiting_cores > limit

    def threads_hint(self) -> int | None:
        """The thread count to try where the engine kept more cores busy than
        others left free (contended or not: its threads wait at barriers)."""
        if not self.cores or self.seconds < MIN_JUDGED_S:
            return None
        engine = self.cores - self.spare_cores
        pressure = self.others_cores
        if self.waiting_cores is not None and self.waiting_cores > STARVED_CORES and self.others_cores > QUIET_CORES:
            pressure = max(pressure, self.waiting_cores)
        fit = fitting_threads(self.cores, pressure)
        return fit if fit < engine else None

    def note(self) -> str:
        """One line saying what the machine did during the cell."""
        parts = [f"other processes used {self.others_cores:.2f} cores ({self.spare_cores:.0f} spare)"]
        if self.waiting_cores is not None:
            parts.append(f"the lab's threads waited {self.waiting_cores:.2f} s per second for a core")
        if self.min_freq_ratio is not None and self.min_freq_ratio < 0.95:
            parts.append(f"CPU clock down to {self.min_freq_ratio * 100:.0f}% of its maximum")
        if self.throttled:
            parts.append("thermal throttling")
        return "; ".join(parts)


# Other processes' busy cores below this share of a core leave it free.
FREE_SLACK = 0.3
# How long a run looks at the machine before it picks its threads.
START_WINDOW_S = 0.3


def fitting_threads(cores: int, others_cores: float) -> int:
    """Engine threads that fit beside ``others_cores`` of other processes'
    work: a thread waiting for a core stalls the others at each barrier."""
    import math

    return max(1, min(cores, cores - math.ceil(others_cores - FREE_SLACK)))


def others_busy_cores(window_s: float = START_WINDOW_S) -> float:
    """Other processes' busy cores over the next ``window_s`` seconds (this
    process tree excluded), as the noise guard counts them."""
    watcher = ContentionWatcher("start", engine_cores=0)
    watcher.sample()
    time.sleep(window_s)
    return watcher.sample()


def _own_tree_cpu(extra: list[int]) -> dict[int, float]:
    """CPU seconds of this process (with its reaped children), its live
    descendants and ``extra`` pids, by pid."""
    import psutil

    me = psutil.Process()
    out: dict[int, float] = {}
    t = me.cpu_times()
    # children_* holds descendants already waited for, so their time stays ours
    out[me.pid] = t.user + t.system + t.children_user + t.children_system
    procs = me.children(recursive=True)
    seen = {p.pid for p in procs} | {me.pid}
    for pid in extra:
        if pid not in seen:
            try:
                procs.append(psutil.Process(pid))
                seen.add(pid)
            except psutil.Error:
                continue
    for p in procs:
        try:
            c = p.cpu_times()
            out[p.pid] = c.user + c.system
        except psutil.Error:
            continue
    return out


def _run_queue_wait_s(pids: list[int]) -> float | None:
    """Seconds the threads of ``pids`` spent runnable but not running, from
    /proc/<pid>/task/*/schedstat; None where the kernel keeps no such count."""
    waited = ran = 0
    for pid in pids:
        for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
            try:
                with open(path) as f:
                    fields = f.read().split()
                ran += int(fields[0])
                waited += int(fields[1])
            except (OSError, ValueError, IndexError):
                continue
    # all zeros: the kernel keeps no scheduler statistics
    return waited / 1e9 if ran > 0 else None


def _throttle_count() -> int | None:
    total = 0
    found = False
    for path in glob.glob("/sys/devices/system/cpu/cpu*/thermal_throttle/*_throttle_count"):
        try:
            with open(path) as f:
                total += int(f.read().strip() or 0)
            found = True
        except (OSError, ValueError):
            continue
    return total if found else None


def _freq_ratio() -> float | None:
    import psutil

    try:
        f = psutil.cpu_freq()
    except (OSError, NotImplementedError, AttributeError):
        return None
    if f is None or not f.max or not f.current:
        return None
    return float(min(1.0, f.current / f.max))


@dataclass(frozen=True)
class Mark:
    """Cumulative counters at a moment; two marks make a window."""

    t: float
    others_s: float
    own_s: float
    wait_s: float | None
    throttles: int | None
    sample_count: int


class ContentionWatcher(PeriodicSampler):
    """Reads the machine every ``interval`` seconds while an arm runs;
    ``own_pids``: the arm's processes that are not this one's descendants (an
    attached local server). ``mark()`` and ``reading(mark)`` bracket a cell."""

    def __init__(
        self, arm: str, engine_cores: int, own_pids: Callable[[], list[int]] = list,
        interval: float = INTERVAL_S, cores: int | None = None,
    ) -> None:
        super().__init__(interval, f"contention-{arm}")
        self.own_pids = own_pids
        self.cores = cores or os.cpu_count() or 1
        self.spare = float(max(0, self.cores - engine_cores))
        self._lock = threading.Lock()
        self._last_t: float | None = None
        self._last_busy = 0.0
        self._last_own: dict[int, float] = {}
        self._others_s = 0.0
        self._own_s = 0.0
        self._count = 0
        self._freqs: list[tuple[float, float]] = []
        # (time, cumulative others' seconds, cumulative own seconds) of recent readings
        self._history: deque[tuple[float, float, float]] = deque(maxlen=64)

    def sample(self) -> float:
        """Take one reading; returns other processes' busy cores since the last."""
        import psutil

        with self._lock:
            t = time.monotonic()
            ct = psutil.cpu_times()
            busy = sum(ct) - ct.idle - getattr(ct, "iowait", 0.0)
            # guest time is also counted inside user on Linux
            busy -= getattr(ct, "guest", 0.0) + getattr(ct, "guest_nice", 0.0)
            own = _own_tree_cpu(self.own_pids())
            ratio = _freq_ratio()
            if ratio is not None:
                self._freqs.append((t, ratio))
            others = 0.0
            if self._last_t is not None and t > self._last_t:
                # a process that started since the last reading counts from zero
                own_delta = sum(v - self._last_own.get(pid, 0.0) for pid, v in own.items())
                own_delta = max(0.0, own_delta)
                delta = max(0.0, (busy - self._last_busy) - own_delta)
                self._others_s += delta
                self._own_s += own_delta
                others = delta / (t - self._last_t)
            self._last_t, self._last_busy, self._last_own = t, busy, own
            self._count += 1
            self._history.append((t, self._others_s, self._own_s))
            return others

    def mark(self) -> Mark:
        self.sample()
        with self._lock:
            assert self._last_t is not None
            return Mark(self._last_t, self._others_s, self._own_s, self._wait(), _throttle_count(), self._count)

    def _wait(self) -> float | None:
        return _run_queue_wait_s([os.getpid(), *self._last_own.keys()])

    def reading(self, since: Mark) -> Contention:
        """What the machine did between ``since`` and now."""
        end = self.mark()
        start_t, start_others, start_own = since.t, since.others_s, since.own_s
        if end.t - start_t < MIN_WINDOW_S:
            with self._lock:
                earlier = [h for h in self._history if h[0] <= end.t - MIN_WINDOW_S] or list(self._history)[:1]
            if earlier and earlier[-1][0] < start_t:
                start_t, start_others, start_own = earlier[-1]
        seconds = max(1e-9, end.t - start_t)
        waiting = None
        if end.wait_s is not None and since.wait_s is not None:
            waiting = max(0.0, end.wait_s - since.wait_s) / max(1e-9, end.t - since.t)
        with self._lock:
            ratios = [r for t, r in self._freqs if since.t <= t <= end.t]
        throttled = end.throttles is not None and since.throttles is not None and end.throttles > since.throttles
        return Contention(
            others_cores=min(float(self.cores), (end.others_s - start_others) / seconds), spare_cores=self.spare,
            seconds=seconds,
            waiting_cores=waiting, min_freq_ratio=min(ratios) if ratios else None, throttled=throttled,
            own_cores=(end.own_s - start_own) / seconds, cores=self.cores,
        )
