"""Measuring and obtaining verify-cost probes (:class:`lab.base.probe.Probe`):
``lab probe``'s measurement through a backend's ``Probing`` capability, and
the probe a run takes before its arms, planned per stack and cached per
machine."""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from lab.api import Probing
from lab.base import machine
from lab.base.machine import machine_info
from lab.base.probe import (
    DEEPER,
    DEFAULT_WIDTHS,
    KIND,
    VERSION,
    Probe,
    ProbeError,
    ProbeInterrupted,
    load,
    needed_widths,
    offloaded,
    save,
)
from lab.kit.models import model_file_bytes
from lab.probing.cycles import MAX_CYCLES, MAX_SECONDS, MIN_CYCLES, Cycles

if TYPE_CHECKING:
    from lab.registry import Registry


def measure(backend: str, model: str, widths: Sequence[int] = DEFAULT_WIDTHS, depth: int | None = None,
            **settings: Any) -> Probe:
    """Load ``backend`` on ``model`` the way a baseline arm would and measure
    T(w) at one KV ``depth`` (None: the backend's own prefix); ``settings``
    are :func:`measure_depths`'s."""
    return measure_depths(backend, model, (depth,), widths, **settings)[0]


def measure_depths(
    backend: str,
    model: str,
    depths: Sequence[int | None],
    widths: Sequence[int] = DEFAULT_WIDTHS,
    method: str | None = None,
    repeats: int = 3,
    threads: int = 0,
    registry: Registry | None = None,
    options: Mapping[str, Any] | None = None,
    bandwidth: bool = True,
    progress: Callable[[str], None] | None = None,
    n_ctx: int | None = None,
    on_curve: Callable[[Probe], None] | None = None,
    requests: tuple[int, int] | None = None,
    max_seconds: float | None = None,
) -> list[Probe]:
    """T(w) at each KV depth in ``depths``, the model loaded once: cycles of
    every width at every depth (:class:`Cycles`), at least ``repeats`` of
    them, until stable; a curve that breaks a rule of
    :mod:`lab.base.probe_rules` has its offending widths measured again, and
    keeps its verdict in its notes. The bandwidth is measured once after the
    engine closed; each curve goes to ``on_curve`` at the end. Ctrl-C raises
    :class:`ProbeInterrupted` with the cycles that finished."""
    from lab.api import BackendContext
    from lab.base.events import Event
    from lab.base.profile import Arm, RunSettings
    from lab.registry import load_registry

    say = progress or (lambda _msg: None)
    widths = tuple(sorted(set(widths) | {1}))
    if repeats < 1:
        raise ProbeError("repeats must be at least 1")
    if not depths:
        raise ProbeError("a probe measures at one depth at least")
    reg = registry or load_registry()
    cls = reg.backend(backend)
    if not issubclass(cls, Probing) or not cls.probe_methods:
        raise ProbeError(f"backend {backend} cannot measure verify cost")
    methods = cls.probe_methods
    method = method or methods[0]
    if method not in methods:
        raise ProbeError(f"backend {backend} measures by {', '.join(methods)}, not {method!r}")
    placed = [d for d in depths if d is not None]
    if placed:
        depth_refusal(cls, backend, method)
        if min(placed) < 0:
            raise ProbeError(f"a KV depth is 0 or more tokens, not {min(placed)}")
    deepest = max(placed) if placed else None
    n_ctx = n_ctx or default_n_ctx(widths, deepest, requests[0] if requests and cls.probe_times_requests else None)
    if deepest is not None and deepest + max(widths) > n_ctx:
        raise ProbeError(f"n_ctx {n_ctx} cannot hold a KV depth of {deepest} tokens and the widest width "
                         f"{max(widths)} (needs {deepest + max(widths)}): a larger --n-ctx, or a shallower depth")
    run = RunSettings(threads=threads, n_ctx=n_ctx)
    arm = Arm(
        name="probe", backend=backend, model=model, drafter=None, n_max=None, options=dict(options or {}),
        drafter_options={}, baseline=None, is_baseline=True, stack=cls.stack, group="probe",
    )
    timed_requests = requests if cls.probe_times_requests else None
    instance = cls(arm, BackendContext(run=run, run_dir="", log=lambda _t: None, probe_requests=timed_requests))

    def emit(_event: Event) -> None:
        return None

    def timed(ws: Sequence[int], at_depth: int | None) -> list[float]:
        if at_depth is None:
            return instance.measure_verify_cost(ws, method)
        return instance.measure_verify_cost_at_depth(ws, at_depth, method)

    # a server per width times whole requests, each width's figure a median of several: no cycles past those asked
    least, most = (repeats, repeats) if cls.probe_times_requests else (max(repeats, MIN_CYCLES), max(repeats, MAX_CYCLES))
    cycles = Cycles(timed, instance.probe_notes, widths, tuple(depths), say, method, least, most,
                    MAX_SECONDS if max_seconds is None else max_seconds)
    interrupted = False
    curves: list[Probe] = []
    try:
        if instance.probe_needs_load(method):
            say(f"loading {model} on {backend}" + (f" (n_ctx {n_ctx})" if placed else ""))
            instance.load(emit)
        cycles.run()
        cycles.check_and_remeasure()
    except KeyboardInterrupt:
        # what finished is kept: the caller saves it and says how much it is
        interrupted = True
    finally:
        instance.close()

    def build(k: int, extra: Mapping[str, Any], size: int | None) -> Probe:
        ws, seconds, notes = cycles.curve_parts(k)
        return Probe(
            backend=backend, model=model, method=method, widths=ws, seconds=seconds,
            created=time.strftime("%Y-%m-%dT%H:%M:%S%z"), machine=machine_info(),
            threads=int(notes.get("threads") or threads) or None,
            bandwidth_bytes_s=None, model_bytes=size, notes={**notes, **extra}, depth=depths[k],
        )

    model_bytes = model_file_bytes(model)
    if interrupted:
        done = cycles.done
        if not done:
            raise ProbeInterrupted(None) from None
        partial = [build(k, {"interrupted": f"after {done} cycle{'s' if done > 1 else ''} of every width"},
                         model_bytes) for k in range(len(depths))]
        for curve in partial:
            if on_curve is not None:
                on_curve(curve)
        raise ProbeInterrupted(partial[0]) from None
    curves = [build(k, {}, None) for k in range(len(depths))]
    for curve in curves:
        if on_curve is not None:
            on_curve(curve)
    bw = None
    if bandwidth and offloaded(curves[-1].notes):
        say("memory read bandwidth not measured: the model ran on a GPU, whose bandwidth the host's would not bound")
    elif bandwidth:
        from lab.telemetry.bandwidth import measure_read_bandwidth

        say("measuring memory read bandwidth")
        try:
            bw = measure_read_bandwidth(threads=threads or None)
        except KeyboardInterrupt:
            last = curves[-1]
            raise ProbeInterrupted(dataclasses.replace(
                last, model_bytes=model_bytes, notes={**last.notes, "interrupted": "during the bandwidth measurement"},
            )) from None
    return [dataclasses.replace(c, bandwidth_bytes_s=bw, model_bytes=model_bytes) for c in curves]


def default_n_ctx(widths: Sequence[int], depth: int | None = None, tokens: int | None = None) -> int:
    """The context a probe loads with: room for its widest pass after the
    backend's own prefix, for ``depth`` tokens before the widest width, and
    for a request of ``tokens`` after its prompt."""
    return max(1024, 4 * max(widths) + 512, (depth or 0) + max(widths), (tokens or 0) + 512)


def depth_refusal(cls: type[Probing], backend: str, method: str) -> None:
    """Refuse, before anything loads, a KV depth the backend's method cannot
    place (it declares the ones that can: ``probe_depth_methods``)."""
    if method in cls.probe_depth_methods:
        return
    if not cls.probe_depth_methods:
        raise ProbeError(f"backend {backend} cannot place a KV depth before its timed passes: it measures at its "
                         "own prefix only (leave out --depths)")
    raise ProbeError(f"backend {backend} places a KV depth by {', '.join(cls.probe_depth_methods)}, "
                     f"not by {method}")


# -- the probe a run takes before its arms ------------------------------------------

# one repeat: each width's figure is already a median of several passes
DEFAULT_REPEATS = 1
DEEPER_MIN_TOKENS = 256
# 2: a llama.cpp probe on a GPU prices T(1) as the baseline decodes it.
# 3: a llama-server probe times steps that kept none of their drafts too.
# 4: a llama.cpp probe on a GPU times the passes that switch width too.
# 5: cycles of every width until stable, checked against the rules (lab.base.probe_rules).
CACHE_VERSION = 5


@dataclass(frozen=True)
class ProbeSpec:
    """One stack to probe: what decides how fast a verify pass runs. Two
    arms with equal specs share a probe."""

    backend: str
    model: str
    threads: int
    options: Mapping[str, Any]
    widths: tuple[int, ...]
    # the arms this stack's probe prices (not part of its identity)
    arms: tuple[str, ...] = ()
    # tokens in the KV cache before the timed passes; None: the backend's own prefix
    depth: int | None = None
    # a probe that times whole requests: the run's (request, warmup) tokens; None elsewhere
    request_tokens: tuple[int, int] | None = None
    # a second, deeper KV depth timed too, so each row reads T(w) at its own depth; None: one depth
    deeper: int | None = None

    @property
    def label(self) -> str:
        return f"{self.backend} / {self.model}"

    def identity(self) -> dict[str, Any]:
        """What the cache keys on: engine, model reference and file, threads,
        backend options, machine; depth and request lengths only where used,
        so older probes keep their keys."""
        from lab.telemetry.bandwidth import machine_identity

        at_depth: dict[str, Any] = {"depth": self.depth} if self.depth is not None else {}
        if self.request_tokens is not None:
            at_depth["request_tokens"] = list(self.request_tokens)
        if self.deeper is not None:
            at_depth["deeper"] = self.deeper
        return at_depth | {
            "kind": KIND, "version": VERSION, "cache_version": CACHE_VERSION,
            "backend": self.backend, "model": self.model, "model_file": _model_file_identity(self.model),
            # threads = 0 is keyed by the cores it means here: a curve of 1 thread never stands for 2
            "threads": self.threads or machine.available_cores(),
            "options": {k: self.options[k] for k in sorted(self.options)},
            "machine": machine_identity(),
        }

    def key(self) -> str:
        import hashlib

        text = json.dumps(self.identity(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:20]


def _model_file_identity(model: str) -> list[Any] | None:
    from lab.kit import models

    try:
        path = models.resolve(model)
        st = path.stat()
    except Exception:  # noqa: BLE001 - a model that does not resolve keys on its reference alone
        return None
    return [path.name, st.st_size, st.st_mtime_ns]


# how far others' busy cores may differ from a cached probe's for it to be reused
LOAD_SLACK_CORES = 0.5


def _same_load(found: Probe) -> bool:
    """Whether the machine is as loaded now as when ``found`` was measured
    (a probe saved without its load is reused only on a quiet machine)."""
    from lab.telemetry.contention import others_busy_cores

    then = found.origin.get("others_cores")
    now = others_busy_cores()
    if not isinstance(then, (int, float)) or isinstance(then, bool):
        return now <= LOAD_SLACK_CORES
    return abs(now - float(then)) <= LOAD_SLACK_CORES


def plan(arms: Sequence[Any], threads: int, registry: Registry,
         depth: int | None = None, requests: tuple[int, int] | None = None) -> tuple[list[ProbeSpec], list[str]]:
    """The stacks to probe for a run (one per speculating target stack,
    widths for its n_max values, at ``depth`` where possible), and a line
    per stack that cannot be probed or not at that depth."""
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
        why = cls.probe_refusal(arm.options)
        if why is not None:
            skipped.append(f"{arm.backend}: no probe of {arm.name}'s own stack ({why})")
            continue
        at = depth
        if depth is not None and cls.probe_methods[0] not in cls.probe_depth_methods:
            at = None
            line = (f"{arm.backend}: its probe cannot place a KV depth, so {arm.name} is priced at the "
                    f"backend's own prefix, not at [run] probe_depth {depth}")
            if line not in skipped:
                skipped.append(line)
        opts = dict(arm.options)
        model = arm.model or ""
        ident = (arm.backend, model, json.dumps(opts, sort_keys=True, default=str))
        n_max = int(arm.n_max or 1)
        old = specs.get(ident)
        wanted = set(needed_widths([n_max]))
        arms_of = (arm.name,)
        if old is not None:
            wanted |= set(old.widths)
            arms_of = (*old.arms, arm.name)
        lengths = requests if cls.probe_times_requests else None
        deeper = deeper_depth(requests[0]) if depth is None and requests and cls.probe_methods[0] in \
            cls.probe_depth_methods else None
        specs[ident] = ProbeSpec(arm.backend, model, threads, opts, tuple(sorted(wanted)), arms_of, depth=at,
                                 request_tokens=lengths, deeper=deeper)
    return list(specs.values()), skipped


def deeper_depth(max_tokens: int) -> int | None:
    """A run's probe's second depth: ``max_tokens``, so that with the backend's prefix
    (llama.cpp's 128) the two bracket a cell after a short prompt, its mean near their
    middle; None for cells under :data:`DEEPER_MIN_TOKENS`, which decode near the prefix."""
    return max_tokens if max_tokens >= DEEPER_MIN_TOKENS else None


def with_deeper(shallow: Probe, deep: Probe) -> Probe:
    """``shallow`` with ``deep``'s seconds as :data:`lab.base.probe.DEEPER`."""
    if deep.widths != shallow.widths or deep.kv_depth is None:
        return shallow
    return dataclasses.replace(shallow, notes={
        **shallow.notes, DEEPER: {"depth": deep.kv_depth, "seconds": [list(r) for r in deep.seconds]}})


def cache_path(spec: ProbeSpec, root: Path | None = None) -> Path:

    return (root or machine.cache_path("probes")) / f"probe-{spec.key()}.json"


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
    if p.depth != spec.depth or (p.depth_span or (None, None))[1] != spec.deeper:
        return None
    if not p.trusted or p.widths_failed:
        return None
    wanted = set(spec.widths)
    if p.notes.get("widths_capped"):
        # the stack stopped the probe at its widest step: the widths past it cannot be had
        wanted = {w for w in wanted if w <= max(p.widths)}
    if not wanted <= set(p.widths):
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
    from lab.telemetry.bandwidth import machine_bandwidth

    found = cached(spec, root)
    if found is not None and not _same_load(found):
        found = None  # measured beside other work than now: not this run's conditions, measured again
    if found is not None:
        bw = machine_bandwidth(threads=spec.threads or None, root=root)
        import dataclasses

        return dataclasses.replace(
            found, bandwidth_bytes_s=found.bandwidth_bytes_s or bw.bytes_s,
            origin={**found.origin, "source": "cached", "key": spec.key()},
        )
    from lab.registry import load_registry
    from lab.telemetry.bandwidth import forget_bandwidth
    from lab.telemetry.contention import ContentionWatcher

    reg = registry or load_registry()
    engine_cores = reg.backend(spec.backend).busy_cores(spec.options, spec.threads)
    t0 = time.perf_counter()
    # a curve measured on busy cores serves this run (flagged) but is not cached
    with ContentionWatcher("probe", engine_cores) as watcher:
        mark = watcher.mark()
        curves = measure_depths(
            spec.backend, spec.model, (spec.depth,) if spec.deeper is None else (spec.depth, spec.deeper),
            widths=spec.widths, repeats=repeats, threads=spec.threads, registry=reg, options=spec.options,
            bandwidth=False, progress=progress, requests=spec.request_tokens,
        )
        p = with_deeper(curves[0], curves[1]) if len(curves) > 1 else curves[0]
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
    # the load it was measured beside: a later run reuses it only beside the same
    origin["others_cores"] = round(busy.others_cores, 2)
    if busy.contended:
        origin["busy"] = busy.note()
    p = dataclasses.replace(p, bandwidth_bytes_s=bw.bytes_s, origin=origin)
    if busy.contended:
        if not bw.cached:
            forget_bandwidth(threads=spec.threads or None, root=root)
    elif p.trusted and not p.widths_failed:
        # a refused curve, or one short of widths that failed, is measured again next time
        save(p, cache_path(spec, root))
    return p


