"""The verify-cost probe: how long one target pass takes to verify w tokens
of one sequence, relative to one token, T(w) = t(w) / t(1).

Speculative decoding assumes T(w) stays near 1 (weights are read once for
all rows). The write-ups' proxy is llama-batched-bench's batch-8 over
batch-1 aggregate throughput, which is 8 / T(8) when T comes from batched
decoding of 8 sequences (Metal 1.13x, CUDA 3.34x). A backend measures
seconds per pass (``Probing.measure_verify_cost``, a capability); this module repeats,
summarizes and saves them as JSON the analysis reads back::

    {"kind": "speclab.probe", "version": 1, "backend": "llamacpp",
     "model": "embedded:smollm2", "method": "decode", "widths": [1, 2, ...],
     "seconds": [[s(w) for w in widths] for each repeat], "created": ...,
     "machine": {...}, "threads": 2, "bandwidth_bytes_s": ..., "model_bytes": ...,
     "summary": {...derived, for people; ignored when loading}}
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

if TYPE_CHECKING:
    from lab.plugins import Registry

KIND = "speclab.probe"
VERSION = 1
PROBE_FILE = "probe.json"
DEFAULT_WIDTHS = tuple(range(1, 17))
# The write-ups' amortization figure: batch-8 over batch-1 throughput.
RATIO_WIDTH = 8


class ProbeError(ValueError):
    pass


def parse_widths(text: str) -> tuple[int, ...]:
    """"1-16", "1,2,4,8" or "1-4,8,16" -> sorted widths, always with 1 (T is
    relative to it)."""
    out: set[int] = {1}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                out.update(range(lo, hi + 1))
            else:
                out.add(int(part))
        except ValueError:
            raise ProbeError(f"bad widths {text!r}: use e.g. 1-16 or 1,2,4,8") from None
    if min(out) < 1:
        raise ProbeError(f"bad widths {text!r}: widths start at 1")
    return tuple(sorted(out))


def format_widths(widths: Sequence[int]) -> str:
    """(1, 2, 3, 4, 8) -> "1-4,8"."""
    parts: list[str] = []
    run: list[int] = []
    for w in sorted(widths):
        if run and w == run[-1] + 1:
            run.append(w)
            continue
        if run:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [w]
    if run:
        parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(parts)


@dataclass(frozen=True)
class Probe:
    backend: str
    model: str
    method: str
    widths: tuple[int, ...]
    seconds: tuple[tuple[float, ...], ...]  # per repeat, per width
    created: str = ""
    machine: Mapping[str, Any] = field(default_factory=dict)
    threads: int | None = None
    bandwidth_bytes_s: float | None = None
    model_bytes: int | None = None
    notes: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.widths or self.widths[0] != 1:
            raise ProbeError("a probe needs width 1 first: T(w) is relative to it")
        if not self.seconds or any(len(rep) != len(self.widths) for rep in self.seconds):
            raise ProbeError("probe seconds must hold one value per width for every repeat")

    def _ratios(self, w: int) -> list[float]:
        i = self.widths.index(w)
        return [rep[i] / rep[0] for rep in self.seconds]

    def t_ratio(self, w: int) -> float | None:
        """T(w), median over repeats; linear between measured widths, None
        beyond the widest one (no guessing past what was measured)."""
        if w in self.widths:
            return statistics.median(self._ratios(w))
        lower = [x for x in self.widths if x < w]
        upper = [x for x in self.widths if x > w]
        if not lower or not upper:
            return None
        a, b = lower[-1], upper[0]
        ta, tb = statistics.median(self._ratios(a)), statistics.median(self._ratios(b))
        return ta + (tb - ta) * (w - a) / (b - a)

    def t_range(self, w: int) -> tuple[float, float, float]:
        """min, median, max of T(w) over repeats."""
        rs = self._ratios(w)
        return min(rs), statistics.median(rs), max(rs)

    def batch_ratio(self, w: int = RATIO_WIDTH) -> tuple[float, float, float] | None:
        """Aggregate throughput at width w over width 1 (w / T(w)): the
        write-ups' batch-8/batch-1 figure. min, median, max over repeats."""
        if w not in self.widths:
            return None
        rs = sorted(w / r for r in self._ratios(w))
        return rs[0], statistics.median(rs), rs[-1]

    def pass_seconds(self, w: int) -> float:
        i = self.widths.index(w)
        return statistics.median(rep[i] for rep in self.seconds)

    def summary(self) -> dict[str, Any]:
        return {
            "T": {str(w): round(self.t_ratio(w) or 0.0, 4) for w in self.widths},
            "T_min_max": {str(w): [round(x, 4) for x in self.t_range(w)[::2]] for w in self.widths},
            "pass_ms": {str(w): round(self.pass_seconds(w) * 1000, 4) for w in self.widths},
            f"batch{RATIO_WIDTH}_ratio": self.batch_ratio(),
            "repeats": len(self.seconds),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": KIND, "version": VERSION, "backend": self.backend, "model": self.model,
            "method": self.method, "widths": list(self.widths), "seconds": [list(r) for r in self.seconds],
            "created": self.created, "machine": dict(self.machine), "threads": self.threads,
            "bandwidth_bytes_s": self.bandwidth_bytes_s, "model_bytes": self.model_bytes,
            "notes": dict(self.notes), "summary": self.summary(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "probe") -> Probe:
        if data.get("kind") != KIND:
            raise ProbeError(f"{where}: not a speclab probe (kind {data.get('kind')!r})")
        if data.get("version") != VERSION:
            raise ProbeError(f"{where}: probe version {data.get('version')!r}, this lab reads {VERSION}")
        try:
            return cls(
                backend=str(data["backend"]), model=str(data["model"]), method=str(data["method"]),
                widths=tuple(int(w) for w in data["widths"]),
                seconds=tuple(tuple(float(s) for s in rep) for rep in data["seconds"]),
                created=str(data.get("created", "")), machine=dict(data.get("machine") or {}),
                threads=data.get("threads"), bandwidth_bytes_s=data.get("bandwidth_bytes_s"),
                model_bytes=data.get("model_bytes"), notes=dict(data.get("notes") or {}),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ProbeError(f"{where}: malformed probe ({exc})") from None

    def render(self) -> str:
        """The curve as text: one line per width with a bar, then the ratio."""
        lines = [
            f"verify cost T(w) on {self.backend} / {self.model} by {self.method}, "
            f"{len(self.seconds)} repeats" + (f", {self.threads} threads" if self.threads else ""),
            f"{'w':>3}  {'pass ms':>8}  {'T(w)':>6}  {'min-max':>13}  {'w/T(w)':>6}",
        ]
        top = max(self.t_ratio(w) or 0.0 for w in self.widths)
        for w in self.widths:
            lo, med, hi = self.t_range(w)
            bar = "#" * max(1, round(30 * med / top)) if top else ""
            lines.append(
                f"{w:>3}  {self.pass_seconds(w) * 1000:>8.3f}  {med:>6.2f}  {lo:>6.2f}-{hi:<6.2f}  {w / med:>6.2f}  {bar}"
            )
        ratio = self.batch_ratio()
        if ratio is not None:
            lo, med, hi = ratio
            lines.append(
                f"batch-{RATIO_WIDTH}/batch-1 throughput: {med:.2f}x (min {lo:.2f}, max {hi:.2f}); "
                f"the write-ups measured 1.13x on Metal, 3.34x on CUDA; {RATIO_WIDTH}x is free verification"
            )
        return "\n".join(lines)


def save(probe: Probe, path: str | Path) -> Path:
    p = Path(path)
    if p.is_dir():
        p = p / PROBE_FILE
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(probe.to_json(), indent=1) + "\n", encoding="utf-8")
    return p


def load(path: str | Path) -> Probe:
    """A probe file, or the probe.json inside a run directory."""
    p = Path(path)
    if p.is_dir():
        p = p / PROBE_FILE
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ProbeError(f"{p}: no probe file here") from None
    except json.JSONDecodeError as exc:
        raise ProbeError(f"{p}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ProbeError(f"{p}: not a speclab probe")
    return Probe.from_json(data, str(p))


def find(run_dir: str | Path) -> Probe | None:
    """The probe saved in a run directory, if any."""
    p = Path(run_dir) / PROBE_FILE
    return load(p) if p.exists() else None


def machine_info() -> dict[str, Any]:
    return {
        "platform": platform.platform(), "machine": platform.machine(), "cpu_count": os.cpu_count(),
        "cpu": _cpu_name(),
    }


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def measure(
    backend: str,
    model: str,
    widths: Sequence[int] = DEFAULT_WIDTHS,
    method: str | None = None,
    repeats: int = 3,
    threads: int = 0,
    registry: Registry | None = None,
    options: Mapping[str, Any] | None = None,
    bandwidth: bool = True,
    progress: Callable[[str], None] | None = None,
) -> Probe:
    """Load ``backend`` on ``model`` the way a baseline arm would and measure
    T(w) ``repeats`` times. The hook the analysis and a runner can call."""
    from lab.api import BackendContext, Probing
    from lab.events import Event
    from lab.plugins import load_registry
    from lab.profiles import Arm, RunSettings

    say = progress or (lambda _msg: None)
    widths = tuple(sorted(set(widths) | {1}))
    if repeats < 1:
        raise ProbeError("repeats must be at least 1")
    reg = registry or load_registry()
    cls = reg.backend(backend)
    if not issubclass(cls, Probing) or not cls.probe_methods:
        raise ProbeError(f"backend {backend} cannot measure verify cost")
    methods = cls.probe_methods
    method = method or methods[0]
    if method not in methods:
        raise ProbeError(f"backend {backend} measures by {', '.join(methods)}, not {method!r}")
    run = RunSettings(threads=threads, n_ctx=max(1024, 4 * max(widths) + 512))
    arm = Arm(
        name="probe", backend=backend, model=model, drafter=None, n_max=None, options=dict(options or {}),
        drafter_options={}, baseline=None, is_baseline=True, stack=cls.stack, group="probe",
    )
    instance = cls(arm, BackendContext(run=run, run_dir="", log=lambda _t: None))

    def emit(_event: Event) -> None:
        return None

    seconds: list[tuple[float, ...]] = []
    notes: dict[str, Any] = {}
    model_bytes: int | None = None
    try:
        if instance.probe_needs_load(method):
            say(f"loading {model} on {backend}")
            instance.load(emit)
        for i in range(repeats):
            say(f"repeat {i + 1}/{repeats}: widths {format_widths(widths)} by {method}")
            got = instance.measure_verify_cost(widths, method)
            if len(got) != len(widths):
                raise ProbeError(f"{backend} returned {len(got)} timings for {len(widths)} widths")
            seconds.append(tuple(float(s) for s in got))
            notes = instance.probe_notes()
        model_bytes = model_file_bytes(model)
    finally:
        instance.close()
    bw = None
    if bandwidth:
        from lab.analysis.roofline import measure_read_bandwidth

        say("measuring memory read bandwidth")
        bw = measure_read_bandwidth(threads=threads or None)
    return Probe(
        backend=backend, model=model, method=method, widths=widths, seconds=tuple(seconds),
        created=time.strftime("%Y-%m-%dT%H:%M:%S%z"), machine=machine_info(),
        threads=int(notes.get("threads") or threads) or None,
        bandwidth_bytes_s=bw, model_bytes=model_bytes, notes=notes,
    )


def model_file_bytes(model: str) -> int | None:
    """Size of the model's file (or directory) on disk: the bytes a token
    reads, near enough for a roofline."""
    from lab import models

    try:
        path = models.resolve(model)
    except Exception:  # noqa: BLE001 - a model that does not resolve here has no size, not an error
        return None
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return path.stat().st_size
