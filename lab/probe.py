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


class ProbeInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) while measuring: ``probe`` holds the repeats that
    finished (every width measured in each), None when none had."""

    def __init__(self, probe: Probe | None) -> None:
        super().__init__()
        self.probe = probe


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


def offloaded(notes: Mapping[str, Any]) -> bool:
    """Whether a backend's probe notes say the model had layers on a GPU."""
    try:
        return int(notes.get("n_gpu_layers") or 0) != 0
    except (TypeError, ValueError):
        return False


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
    # How a run came by this probe: {"source": "measured" | "cached" | "file",
    # "seconds": what measuring cost, "key": the cache key, ...}. Empty for
    # a probe measured by `lab probe`.
    origin: Mapping[str, Any] = field(default_factory=dict)

    @property
    def on_gpu(self) -> bool:
        """Whether the probed model ran with layers offloaded to a GPU (the
        backend's ``n_gpu_layers`` note), whose memory, not the host's,
        bounds its decoding."""
        return offloaded(self.notes)

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
            "notes": dict(self.notes), "origin": dict(self.origin), "summary": self.summary(),
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
                origin=dict(data.get("origin") or {}),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ProbeError(f"{where}: malformed probe ({exc})") from None

    def origin_line(self) -> str:
        """How the run came by this probe, for progress and the report:
        "measured in 4.1 s", "cached (measured 2026-12-01T10:50:00+0000)"."""
        source = self.origin.get("source")
        if source == "measured":
            text = f"measured in {float(self.origin.get('seconds') or 0.0):.1f} s"
            if self.origin.get("busy"):
                text += f" on a busy machine ({self.origin['busy']}), so not cached"
            return text
        if source == "cached":
            return f"cached (measured {self.created or 'earlier'})"
        if source == "file":
            return f"from {self.origin.get('path')} (measured {self.created or 'earlier'})"
        return f"measured {self.created}" if self.created else "measured earlier"

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
    from lab.strictjson import dumps

    p.write_text(dumps(probe.to_json(), indent=1) + "\n", encoding="utf-8")
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
    interrupted = False
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
    except KeyboardInterrupt:
        # what finished is kept: the caller saves it and says how much it is
        interrupted = True
    finally:
        instance.close()

    def build(bw: float | None, size: int | None, more: Mapping[str, Any]) -> Probe:
        return Probe(
            backend=backend, model=model, method=method, widths=widths, seconds=tuple(seconds),
            created=time.strftime("%Y-%m-%dT%H:%M:%S%z"), machine=machine_info(),
            threads=int(notes.get("threads") or threads) or None,
            bandwidth_bytes_s=bw, model_bytes=size, notes={**notes, **more},
        )

    if interrupted:
        kept = build(None, model_file_bytes(model), {"interrupted": f"after {len(seconds)} of {repeats} repeats"})
        raise ProbeInterrupted(kept if seconds else None) from None
    bw = None
    if bandwidth and offloaded(notes):
        say("memory read bandwidth not measured: the model ran on a GPU, whose bandwidth the host's would not bound")
    elif bandwidth:
        from lab.analysis.roofline import measure_read_bandwidth

        say("measuring memory read bandwidth")
        try:
            bw = measure_read_bandwidth(threads=threads or None)
        except KeyboardInterrupt:
            raise ProbeInterrupted(build(None, model_bytes, {"interrupted": "during the bandwidth measurement"})) from None
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


# -- the probe a run takes before its arms ------------------------------------------

# One repeat: a default probe must cost seconds on two cores, and each
# width's figure is already the median of several interleaved passes
# (lab probe --repeats gives the spread over repeats).
DEFAULT_REPEATS = 1
# 2: a llama.cpp probe on a GPU prices T(1) as the baseline decodes it.
CACHE_VERSION = 2


@dataclass(frozen=True)
class ProbeReported:
    """A run-level event of the probe phase, before any arm runs: one line
    of progress (``done`` false while measuring) and, when done, the probe
    itself (None when the stack could not be probed)."""

    stack: str
    text: str
    done: bool = True
    probe: Probe | None = None
    t: float = field(default_factory=time.perf_counter)


@dataclass(frozen=True)
class ProbeSpec:
    """One stack to probe: what decides how fast a verify pass runs. Two
    arms with equal specs share a probe."""

    backend: str
    model: str
    threads: int
    options: Mapping[str, Any]
    widths: tuple[int, ...]

    @property
    def label(self) -> str:
        return f"{self.backend} / {self.model}"

    def identity(self) -> dict[str, Any]:
        """What the cache keys on: the engine, the model (its reference and
        its file, so a rebuilt model is probed again), threads, the arm's
        backend options (GPU layers, batch-invariant decoding and the like)
        and the machine (CPU model, cores, GPUs)."""
        from lab.bandwidth import machine_identity

        return {
            "kind": KIND, "version": VERSION, "cache_version": CACHE_VERSION,
            "backend": self.backend, "model": self.model, "model_file": _model_file_identity(self.model),
            "threads": self.threads, "options": {k: self.options[k] for k in sorted(self.options)},
            "machine": machine_identity(),
        }

    def key(self) -> str:
        import hashlib

        text = json.dumps(self.identity(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:20]


def _model_file_identity(model: str) -> list[Any] | None:
    from lab import models

    try:
        path = models.resolve(model)
        st = path.stat()
    except Exception:  # noqa: BLE001 - a model that does not resolve keys on its reference alone
        return None
    return [path.name, st.st_size, st.st_mtime_ns]


def needed_widths(n_maxes: Sequence[int]) -> tuple[int, ...]:
    """Widths a profile's n_max values need (1 .. max n_max + 1), plus a few
    beyond so the prediction can say whether a larger n_max would pay."""
    top = max([*n_maxes, 1]) + 1
    # two widths past the top: enough for the curve to say whether a larger
    # n_max would pay (interpolated between them), few enough to stay cheap
    extra = {top + 2, min(2 * top, top + 16)}
    return tuple(sorted(set(range(1, top + 1)) | extra))


def plan(arms: Sequence[Any], threads: int, registry: Registry) -> tuple[list[ProbeSpec], list[str]]:
    """The stacks to probe for a run: one per distinct target stack that
    speculates, widths for every n_max it runs. Also a line per stack that
    cannot be probed (its backend has no Probing capability)."""
    from lab.api import Probing

    specs: dict[tuple[str, str, str], ProbeSpec] = {}
    skipped: list[str] = []
    for arm in arms:
        if arm.is_baseline:
            continue
        try:
            cls = registry.backend(arm.backend)
        except Exception:  # noqa: BLE001 - the arm reports its own load failure later
            continue
        if not issubclass(cls, Probing) or not cls.probe_methods:
            line = f"{arm.backend}: cannot measure verify cost, so no prediction for {arm.name}"
            if line not in skipped:
                skipped.append(line)
            continue
        opts = dict(arm.options)
        model = arm.model or ""
        ident = (arm.backend, model, json.dumps(opts, sort_keys=True, default=str))
        n_max = int(arm.n_max or 1)
        old = specs.get(ident)
        wanted = set(needed_widths([n_max]))
        if old is not None:
            wanted |= set(old.widths)
        specs[ident] = ProbeSpec(arm.backend, model, threads, opts, tuple(sorted(wanted)))
    return list(specs.values()), skipped


def cache_path(spec: ProbeSpec, root: Path | None = None) -> Path:
    from lab.bandwidth import cache_root

    return (root or cache_root()) / f"probe-{spec.key()}.json"


def cached(spec: ProbeSpec, root: Path | None = None) -> Probe | None:
    """The cached probe of this stack on this machine when it covers the
    widths asked for; None otherwise (a miss, or a torn file)."""
    path = cache_path(spec, root)
    if not path.exists():
        return None
    try:
        p = load(path)
    except ProbeError:
        return None
    if not set(spec.widths) <= set(p.widths):
        return None
    return p


def obtain(
    spec: ProbeSpec,
    registry: Registry | None = None,
    repeats: int = DEFAULT_REPEATS,
    root: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> Probe:
    """The probe of one stack: from the cache, else measured now (T(w) and
    the machine's bandwidth) and cached. ``origin`` says which and what
    measuring cost."""
    from lab.bandwidth import machine_bandwidth

    found = cached(spec, root)
    if found is not None:
        bw = machine_bandwidth(threads=spec.threads or None, root=root)
        import dataclasses

        return dataclasses.replace(
            found, bandwidth_bytes_s=found.bandwidth_bytes_s or bw.bytes_s,
            origin={**found.origin, "source": "cached", "key": spec.key()},
        )
    from lab.bandwidth import forget_bandwidth
    from lab.contention import ContentionWatcher
    from lab.plugins import load_registry

    reg = registry or load_registry()
    engine_cores = reg.backend(spec.backend).busy_cores(spec.options, spec.threads)
    t0 = time.perf_counter()
    # A curve measured while other processes held the cores is noise: it
    # serves this run (flagged) but is not kept for the next one.
    with ContentionWatcher("probe", engine_cores) as watcher:
        mark = watcher.mark()
        p = measure(
            spec.backend, spec.model, widths=spec.widths, repeats=repeats, threads=spec.threads,
            registry=reg, options=spec.options, bandwidth=False, progress=progress,
        )
        t_curve = time.perf_counter() - t0
        bw = machine_bandwidth(threads=spec.threads or None, root=root)
        busy = watcher.reading(mark)
    spent = time.perf_counter() - t0
    import dataclasses

    origin: dict[str, Any] = {
        "source": "measured", "seconds": spent, "curve_s": t_curve,
        "bandwidth": {"bytes_s": bw.bytes_s, "method": bw.method, "cached": bw.cached, "measured": bw.measured},
        "key": spec.key(), "identity": spec.identity(),
    }
    if busy.contended:
        origin["busy"] = busy.note()
    p = dataclasses.replace(p, bandwidth_bytes_s=bw.bytes_s, origin=origin)
    if busy.contended:
        if not bw.cached:
            forget_bandwidth(threads=spec.threads or None, root=root)
    else:
        save(p, cache_path(spec, root))
    return p


def save_for_run(run_dir: str | Path, got: Sequence[Probe]) -> list[Path]:
    """A run directory's probes: the first stack's as probe.json (what
    reports read), any further stack's as probe-2.json, probe-3.json..."""
    out = []
    for i, p in enumerate(got):
        name = PROBE_FILE if i == 0 else f"probe-{i + 1}.json"
        out.append(save(p, Path(run_dir) / name))
    return out


def find_all(run_dir: str | Path) -> list[Probe]:
    """Every probe saved in a run directory, probe.json first."""
    d = Path(run_dir)
    first = find(d)
    if first is None:
        return []
    rest = sorted(d.glob("probe-*.json"), key=lambda f: int(f.stem.split("-")[1]) if f.stem.split("-")[1].isdigit() else 0)
    return [first] + [load(f) for f in rest]
