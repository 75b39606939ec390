"""The verify-cost probe's curve and its file: how long one target pass
over w tokens of one sequence takes relative to one token, T(w) = t(w) / t(1).
A backend measures seconds per pass (``Probing.measure_verify_cost``); this
module summarizes them and saves them as JSON::

    {"kind": "speclab.probe", "version": 1, "backend": "llamacpp",
     "model": "embedded:smollm2", "method": "decode", "widths": [1, 2, ...],
     "seconds": [[s(w) for w in widths] for each repeat], "created": ...,
     "machine": {...}, "threads": 2, "bandwidth_bytes_s": ..., "model_bytes": ...,
     "depth": 512, "summary": {...derived, for people; ignored when loading}}

``depth``: tokens in the KV cache before each timed pass (None: the
backend's own prefix). Several depths of one stack make a :class:`Surface`
(kind ``speclab.probe-surface``).
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from lab.base import probe_rules, rundir

# A pass's kind by the pass before it (a step's ``pass_kind``): a backend that
# replays captured graphs runs a switching pass without one and captures on the next.
FIRST_PASS = "first"  # the cell's first pass after its prompt
SWITCH_PASS = "switch"  # another width than the pass before
SECOND_PASS = "second"  # the same width as a switching pass right before it
STEADY_PASS = "steady"  # any later pass of the same width
PASS_KINDS = (FIRST_PASS, SWITCH_PASS, SECOND_PASS, STEADY_PASS)

KIND = "speclab.probe"
VERSION = 1
PROBE_FILE = rundir.PROBE_FILE
DEFAULT_WIDTHS = tuple(range(1, 17))
# The write-ups' amortization figure: batch-8 over batch-1 throughput.
RATIO_WIDTH = 8
# ``notes["prices"]`` of a probe whose figures above width 1 are whole steps
# (w - 1 drafts at full acceptance, draft and loop inside), as a server measures.
PRICES_STEPS = "steps"
# notes[DEEPER]: the widths at a deeper KV depth, {"depth": D, "seconds": [[s(w) ...] per repeat]}
DEEPER = "deeper"


class ProbeError(ValueError):
    pass


class ProbeWidthCap(ProbeError):
    """The stack cannot verify past ``max_width`` tokens a step (a DFlash
    draft's trained block): the probe measures the widths up to it and says
    why it stopped there."""

    def __init__(self, max_width: int, why: str) -> None:
        super().__init__(f"widths above {max_width} cannot be measured: {why}")
        self.max_width = max_width
        self.why = why


class ProbeWidthsFailed(ProbeError):
    """Some widths could not be measured (a wider server out of memory): the
    backend hands over the ones that ran (width 1 among them) and why each
    other did not, so the probe keeps a curve over the widths that ran."""

    def __init__(self, seconds: Mapping[int, float], failed: Mapping[int, str],
                 notes: Mapping[str, Any] | None = None) -> None:
        said = "; ".join(f"width {w}: {why}" for w, why in sorted(failed.items()))
        super().__init__(f"widths {format_widths(sorted(failed))} could not be measured ({said})")
        self.seconds = dict(seconds)
        self.failed = dict(failed)
        self.notes = dict(notes or {})


# how a backend words a width that failed for memory, and the widths it did not try past one
OUT_OF_MEMORY = "out of memory"
NOT_TRIED = "not tried"


class UntrustedProbe(ProbeError):
    """A curve that breaks a rule no machine can (:mod:`lab.base.probe_rules`):
    nothing may be priced with it."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"no trustworthy probe: {reason}")
        self.reason = reason


class ProbeInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) while measuring: ``probe`` holds the repeats that
    finished (every width measured in each), None when none had."""

    def __init__(self, probe: Probe | None) -> None:
        super().__init__()
        self.probe = probe


# Past these a probe file is damaged, not measured.
MAX_WIDTH = 4096
MIN_PASS_SECONDS = 1e-9
MAX_PASS_SECONDS = 1e6
# The deepest KV depth a probe file may name (past any model's context today).
MAX_DEPTH = 1 << 24


def _shown(value: Any) -> str:
    text = repr(value) if not isinstance(value, BaseException) else str(value)
    return text if len(text) <= 120 else text[:120] + "..."


def _width(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WIDTH:
        raise ValueError(f"a width must be an integer 1..{MAX_WIDTH}, got {_shown(value)}")
    return value


def _seconds(value: Any) -> float:
    """A measured pass: a positive, finite number of seconds (T(w) divides
    by the pass at width 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not MIN_PASS_SECONDS <= value <= MAX_PASS_SECONDS:
        raise ValueError(f"a pass must take {MIN_PASS_SECONDS:g} to {MAX_PASS_SECONDS:g} seconds, got {_shown(value)}")
    return float(value)


def saved_seconds(value: Any) -> float | None:
    """A duration as a saved file holds it: a finite number above 0, else
    None (a figure that is missing or damaged is left out, not guessed)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None
    return float(value)


def _optional(value: Any, kind: type, key: str) -> Any:
    """An optional figure: None, or a positive finite number (an integer
    where ``kind`` is int)."""
    if value is None:
        return None
    ok = not isinstance(value, bool) and isinstance(value, (int,) if kind is int else (int, float))
    if not ok or not (0 < value < float("inf")):
        raise ValueError(f"{key} must be a positive {'integer' if kind is int else 'number'} or null, got {_shown(value)}")
    return kind(value)


def _depth(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_DEPTH:
        raise ValueError(f"a KV depth must be an integer 0..{MAX_DEPTH} or null, got {_shown(value)}")
    return value


def parse_depths(text: str) -> tuple[int, ...]:
    """"512,2048,8192" (or "2k,8k") -> rising KV depths, each once."""
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip().lower()
        if not part:
            continue
        scale = 1024 if part.endswith("k") else 1
        try:
            value = int(part[:-1] if scale > 1 else part) * scale
            _depth(value)
        except ValueError:
            raise ProbeError(f"bad depths {text!r}: tokens in the KV cache, e.g. 512,2048,8192 or 512,2k,8k "
                             f"(0..{MAX_DEPTH})") from None
        out.add(value)
    if not out:
        raise ProbeError(f"bad depths {text!r}: name at least one")
    return tuple(sorted(out))


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


def _between(known: Mapping[int, float], w: int) -> float | None:
    """The figure at width w: measured there, else linear between the
    nearest measured widths either side, else None (nothing past them)."""
    if w in known:
        return known[w]
    lower = [x for x in known if x < w]
    upper = [x for x in known if x > w]
    if not lower or not upper:
        return None
    a, b = max(lower), min(upper)
    return known[a] + (known[b] - known[a]) * (w - a) / (b - a)


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
    # how a run came by it: {"source": "measured" | "cached" | "file", "seconds", "key", ...}
    origin: Mapping[str, Any] = field(default_factory=dict)
    # tokens in the KV cache before each timed pass; None: the backend's own prefix
    depth: int | None = None

    @property
    def kv_depth(self) -> int | None:
        """The KV depth the passes ran at: the one asked for, else the prefix
        the backend's notes name (llama.cpp's ``prefix_tokens``), else None."""
        if self.depth is not None:
            return self.depth
        prefix = self.notes.get("prefix_tokens")
        return prefix if isinstance(prefix, int) and not isinstance(prefix, bool) else None

    @property
    def prices_steps(self) -> bool:
        """Whether T(w) here is a whole step's cost (:data:`PRICES_STEPS`)
        rather than one target pass over w tokens."""
        return self.notes.get("prices") == PRICES_STEPS

    @property
    def priced_by(self) -> str:
        """What measured the figures, for the report: the engine a backend
        names (``llama-server``), else the backend."""
        return str(self.notes.get("priced_by") or self.backend)

    def prices_arm(self, arm: str, backend: Any, model: Any) -> bool:
        """Whether this probe was taken for this arm's own stack: the arms a
        run took it for (``origin["arms"]``) where it says, else the same
        backend and model (runs saved before it said)."""
        arms = self.origin.get("arms")
        if isinstance(arms, (list, tuple)):
            return arm in arms
        return self.backend == backend and self.model == model

    @property
    def on_gpu(self) -> bool:
        """Whether the probed model ran with layers offloaded to a GPU (the
        backend's ``n_gpu_layers`` note), whose memory, not the host's,
        bounds its decoding."""
        return offloaded(self.notes)

    def curves(self) -> list[probe_rules.Curve]:
        """Its passes as the rules read them: this depth, then the deeper one where timed."""
        out = [probe_rules.Curve(self.kv_depth, self.widths, self.seconds)]
        deeper = self._deeper()
        if deeper is not None:
            out.append(probe_rules.Curve(deeper[0], self.widths, deeper[1]))
        return out

    @cached_property
    def trust(self) -> probe_rules.Trust:
        """Whether a prediction may use this curve (:mod:`lab.base.probe_rules`)."""
        return probe_rules.judge(self.curves(), self.notes.get(probe_rules.CHECKS), self.prices_steps)

    @property
    def trusted(self) -> bool:
        return self.trust.trusted

    def require_trusted(self) -> None:
        """Raise :class:`UntrustedProbe` with the reason where the curve breaks a rule."""
        if not self.trust.trusted:
            raise UntrustedProbe(self.trust.reason)

    @property
    def widths_failed(self) -> dict[int, str]:
        """Widths the probe could not measure and why (notes' ``widths_failed``)."""
        got = self.notes.get("widths_failed")
        out: dict[int, str] = {}
        if isinstance(got, Mapping):
            for k, v in got.items():
                try:
                    out[int(k)] = str(v)
                except (TypeError, ValueError):
                    continue
        return out

    def trust_words(self) -> str:
        """The verdict in a clause: refused with the reason, or the checks it
        passed and what was measured again, and the breaches kept as the engine's."""
        trust = self.trust
        if not trust.trusted:
            return f"no trustworthy probe: {trust.reason}"
        broke = {b.rule for b in trust.engine}
        kept = "T(1) = 1" + ("" if probe_rules.RISING in broke else ", rising in w") \
            + ("" if self.prices_steps or probe_rules.CEILING in broke else ", T(w) <= w") \
            + (", rising with KV depth" if self.depth_span else "")
        text = f"checked: {kept}, within its repeats' noise"
        if trust.remeasured:
            text += f", after measuring width{'s' if len(trust.remeasured) > 1 else ''} " \
                    f"{', '.join(map(str, trust.remeasured))} again"
        if not trust.checked:
            text += " (a probe from before the lab re-measured what broke a rule)"
        if trust.engine:
            text += ("; kept as this engine's, since measuring them again repeated them: "
                     + probe_rules.summary(trust.engine, most=4))
        return text

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
        return _between({x: statistics.median(self._ratios(x)) for x in self.widths}, w)

    def _deeper(self) -> tuple[int, tuple[tuple[float, ...], ...]] | None:
        """(depth, seconds) of :data:`DEEPER`; None where absent or damaged."""
        got = self.notes.get(DEEPER)
        if not isinstance(got, Mapping) or self.kv_depth is None:
            return None
        try:
            depth = _depth(got["depth"])
            seconds = tuple(tuple(_seconds(s) for s in rep) for rep in got["seconds"])
        except (KeyError, TypeError, ValueError):
            return None
        if depth is None or depth <= self.kv_depth or len(seconds) != len(self.seconds) \
                or any(len(rep) != len(self.widths) for rep in seconds):
            return None
        return depth, seconds

    @property
    def depth_span(self) -> tuple[int, int] | None:
        """(shallow, deep): the two KV depths of a probe timed at both, else None."""
        deeper = self._deeper()
        return None if deeper is None or self.kv_depth is None else (self.kv_depth, deeper[0])

    def _seconds_at(self, depth: float) -> list[tuple[float, ...]] | None:
        """Each repeat's seconds per width at KV ``depth``, linear through the
        two depths (carried on past them); None for one depth or at 0 or below."""
        deeper, lo = self._deeper(), self.kv_depth
        if deeper is None or lo is None:
            return None
        f = (depth - lo) / (deeper[0] - lo)
        out = [tuple(a + (b - a) * f for a, b in zip(shallow, deep)) for shallow, deep in zip(self.seconds, deeper[1])]
        return out if all(s > 0 for rep in out for s in rep) else None

    def t_ratio_at(self, w: int, depth: float | None) -> float | None:
        """T(w) at KV ``depth`` (:meth:`_seconds_at`), median over repeats,
        linear between widths; :meth:`t_ratio` for one depth or no ``depth``."""
        reps = None if depth is None else self._seconds_at(depth)
        if reps is None:
            return self.t_ratio(w)
        return _between({x: statistics.median(rep[i] / rep[0] for rep in reps) for i, x in enumerate(self.widths)}, w)

    def pass_seconds_at(self, w: int, depth: float | None) -> float:
        """A w-row pass at KV ``depth`` as :meth:`t_ratio_at` reads it."""
        reps = None if depth is None else self._seconds_at(depth)
        if reps is None:
            return self.pass_seconds(w)
        i = self.widths.index(w)
        return statistics.median(rep[i] for rep in reps)

    def kept_none_ratio(self, w: int) -> float | None:
        """A whole step at width w that kept none of its drafts, in baseline
        tokens, where a step-priced probe measured one (notes' ``kept_none_s``)."""
        table = self.notes.get("kept_none_s")
        if not self.prices_steps or not isinstance(table, Mapping):
            return None
        unit = self.seconds[-1][0]
        try:
            known = {int(k): float(v) / unit for k, v in table.items()}
        except (TypeError, ValueError, ArithmeticError):
            return None
        return _between({k: v for k, v in known.items() if k in self.widths and k > 1 and math.isfinite(v) and v > 0},
                        w)

    def step_ratio(self, w: int, kept_share: float) -> float | None:
        """A step's cost at width w keeping ``kept_share`` of its drafts: on
        the line from :meth:`kept_none` to T(w), or T(w) without the former."""
        full = self.t_ratio(w)
        none = self.kept_none_ratio(w)
        if full is None or none is None:
            return full
        share = min(1.0, max(0.0, kept_share))
        return none + (full - none) * share

    def _switch_table(self, sizes: tuple[int, ...]) -> tuple[float, dict[int, tuple[float, ...]]] | None:
        """The notes' ``switch_s`` as (one row back to back, entry per width),
        entries of a length in ``sizes``; None where absent or damaged."""
        table = self.notes.get("switch_s")
        if not isinstance(table, Mapping) or not isinstance(table.get("widths"), Mapping):
            return None
        try:
            one = float(table["one_s"])
            rows = {int(k): tuple(float(x) for x in v) for k, v in table["widths"].items()}
        except (KeyError, TypeError, ValueError):
            return None
        good = {k: v for k, v in rows.items()
                if k > 1 and len(v) in sizes and all(math.isfinite(x) and x > 0 for x in v)}
        return (one, good) if math.isfinite(one) and good else None

    def switch_passes(self, w: int) -> dict[str, tuple[float, float]] | None:
        """Seconds of each pass kind timed at exactly ``w`` rows, as (w rows,
        one row): steady, switch and (entries of five) second."""
        found = self._switch_table((3, 5))
        if found is None or w not in found[1]:
            return None
        one, v = found[0], found[1][w]
        kinds = {STEADY_PASS: (v[0], one), SWITCH_PASS: (v[1], v[2])}
        return kinds | {SECOND_PASS: (v[3], v[4])} if len(v) == 5 else kinds

    def _over(self, good: Mapping[int, tuple[float, ...]], w: int, at: int,
              base: Callable[[tuple[float, ...]], float]) -> float | None:
        """Entry figure ``at`` less ``base(entry)``, in the last repeat's
        one-row passes, never below 0, linear between widths."""
        unit = self.seconds[-1][0]
        return _between({k: max(0.0, (v[at] - base(v)) / unit) for k, v in good.items()}, w)

    def switch_ratio(self, w: int) -> tuple[float, float] | None:
        """Baseline tokens a pass costs beyond back to back when the pass
        before had another width: (w rows after one, one after w rows)."""
        found = self._switch_table((3, 5))
        if found is None:
            return None
        one, good = found
        into, out = self._over(good, w, 1, lambda v: v[0]), self._over(good, w, 2, lambda _v: one)
        return (into, out) if into is not None and out is not None else None

    def second_ratio(self, w: int) -> tuple[float, float] | None:
        """Baseline tokens the pass right after a switch costs beyond back to
        back (where a CUDA graph is captured): (w rows, one row)."""
        found = self._switch_table((5,))
        if found is None:
            return None
        one, good = found
        into, out = self._over(good, w, 3, lambda v: v[0]), self._over(good, w, 4, lambda _v: one)
        return (into, out) if into is not None and out is not None else None

    CELL_START_PASSES = 2

    def _cell_table(self) -> dict[int, list[float]] | None:
        """The notes' ``cell_s`` per width (each pass's seconds in order),
        widths with too few good passes left out; None where it is absent."""
        table = self.notes.get("cell_s")
        widths = table.get("widths") if isinstance(table, Mapping) else None
        if not isinstance(widths, Mapping):
            return None
        out: dict[int, list[float]] = {}
        for k, v in widths.items():
            try:
                w, passes = int(k), [float(x) for x in v]
            except (TypeError, ValueError):
                continue
            if len(passes) >= self.CELL_START_PASSES + 2 and all(math.isfinite(x) and x > 0 for x in passes):
                out[w] = passes
        return out or None

    def cell_start_ratio(self, w: int) -> float | None:
        """Baseline tokens a cell pays once for its first passes of width w
        beyond steady ones (notes' ``cell_s``); None where not timed."""
        table = self._cell_table()
        if table is None:
            return None
        unit = self.seconds[-1][0]
        k = self.CELL_START_PASSES
        extra = {w_: max(0.0, (sum(p[:k]) - k * statistics.median(p[k:])) / unit) for w_, p in table.items()}
        return _between(extra, w)

    @property
    def drafted_token_s(self) -> float:
        """Seconds of one token as a draft model decodes it: the device-picked
        one-row pass where the probe timed one, else T(1)'s pass."""
        table = self.notes.get("switch_s")
        timed = saved_seconds(table.get("one_s")) if isinstance(table, Mapping) and self.notes.get("gpu_pick") is True else None
        return timed if timed is not None else self.pass_seconds(1)

    def t_interval(self, w: int) -> probe_rules.Figure:
        """T(w) at a measured width: the median over repeats with its interval
        (:func:`lab.base.probe_rules.figure`), the noise the rules read."""
        return probe_rules.figure(self._ratios(w))

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

    def alone_ratio(self, w: int) -> float | None:
        """A w-row pass waited on (a rollback's re-run), in baseline tokens:
        T(w), at w = 1 the notes' unpipelined ``one_row_pass_s`` where kept."""
        if w != 1:
            return self.t_ratio(w)
        alone = saved_seconds(self.notes.get("one_row_pass_s"))
        return 1.0 if alone is None else alone / self.pass_seconds(1)

    def summary(self) -> dict[str, Any]:
        return {
            "T": {str(w): round(self.t_ratio(w) or 0.0, 4) for w in self.widths},
            "T_min_max": {str(w): [round(x, 4) for x in self.t_range(w)[::2]] for w in self.widths},
            "pass_ms": {str(w): round(self.pass_seconds(w) * 1000, 4) for w in self.widths},
            f"batch{RATIO_WIDTH}_ratio": self.batch_ratio(),
            "repeats": len(self.seconds),
            "trusted": self.trusted,
            "trust": self.trust_words(),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": KIND, "version": VERSION, "backend": self.backend, "model": self.model,
            "method": self.method, "widths": list(self.widths), "seconds": [list(r) for r in self.seconds],
            "created": self.created, "machine": dict(self.machine), "threads": self.threads,
            "bandwidth_bytes_s": self.bandwidth_bytes_s, "model_bytes": self.model_bytes,
            "notes": dict(self.notes), "origin": dict(self.origin), "depth": self.depth, "summary": self.summary(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "probe") -> Probe:
        if data.get("kind") != KIND:
            raise ProbeError(f"{where}: not a speclab probe (kind {_shown(data.get('kind'))})")
        if data.get("version") != VERSION:
            raise ProbeError(f"{where}: probe version {_shown(data.get('version'))}, this lab reads {VERSION}")
        try:
            widths = tuple(_width(w) for w in data["widths"])
            seconds = tuple(tuple(_seconds(s) for s in rep) for rep in data["seconds"])
            if list(widths) != sorted(set(widths)):
                raise ValueError("widths must rise, each once")
            return cls(
                backend=str(data["backend"]), model=str(data["model"]), method=str(data["method"]),
                widths=widths, seconds=seconds,
                created=str(data.get("created", "")), machine=dict(data.get("machine") or {}),
                threads=_optional(data.get("threads"), int, "threads"),
                bandwidth_bytes_s=_optional(data.get("bandwidth_bytes_s"), float, "bandwidth_bytes_s"),
                model_bytes=_optional(data.get("model_bytes"), int, "model_bytes"), notes=dict(data.get("notes") or {}),
                origin=dict(data.get("origin") or {}),
                depth=_depth(data.get("depth")),
            )
        except (KeyError, TypeError, ValueError, ArithmeticError) as exc:
            raise ProbeError(f"{where}: malformed probe ({_shown(exc)})") from None

    def origin_line(self, verdict: bool = True) -> str:
        """How the run came by this probe, for progress and the report:
        "measured in 4.1 s", "cached (measured 2026-12-01T10:50:00+0000)",
        with the KV depth where one was asked for (", at KV depth 2048")."""
        text = self._source_words() + (f", at KV depth {self.depth}" if self.depth is not None else "")
        if self.widths_failed:
            text += f"; {self.failed_words()}"
        return text + ("" if self.trusted or not verdict else f"; {self.trust_words()}")

    def failed_words(self) -> str:
        """The widths that did not run and why, in a clause ("" where all ran)."""
        failed = self.widths_failed
        if not failed:
            return ""
        # the reasons once each: the widths past the first failure share theirs
        why = "; ".join(dict.fromkeys(failed[w] for w in sorted(failed)))
        fit = all(OUT_OF_MEMORY in r for r in failed.values() if not r.startswith(NOT_TRIED))
        return (f"width{'s' if len(failed) > 1 else ''} {format_widths(sorted(failed))} "
                f"{'did not fit' if fit else 'did not run'} ({why}): nothing is priced there, the widths that ran are")

    def _source_words(self) -> str:
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
            f"{len(self.seconds)} repeats" + (f", {self.threads} threads" if self.threads else "")
            + (f", KV depth {self.kv_depth}" if self.kv_depth is not None else ""),
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
        stopped = self.notes.get("stopped")
        if isinstance(stopped, str) and stopped:
            lines.append(f"repeats: {stopped}")
        if self.widths_failed:
            lines.append(self.failed_words())
        lines.append(self.trust_words())
        return "\n".join(lines)


def save(probe: Probe, path: str | Path) -> Path:
    p = Path(path)
    if p.is_dir():
        p = p / PROBE_FILE
    p.parent.mkdir(parents=True, exist_ok=True)
    from lab.base.strictjson import dumps

    p.write_text(dumps(probe.to_json(), indent=1) + "\n", encoding="utf-8")
    return p


MAX_PROBE_BYTES = 16 * 1024 * 1024


def _read(path: str | Path) -> tuple[Path, dict[str, Any]]:
    """A probe or surface file (or the probe.json inside a run directory),
    plain or gzip, as a JSON object: a regular file of at most
    MAX_PROBE_BYTES, numbers bounded."""
    from lab.base.rundir import JsonFileError, read_saved

    try:
        p, data, beyond = read_saved(path, PROBE_FILE, MAX_PROBE_BYTES, "probe file")
    except JsonFileError as exc:
        if exc.kind == JsonFileError.MISSING:
            raise ProbeError(f"{exc.path}: no probe file here") from None
        raise ProbeError(str(exc).replace("a probe file", "a probe")) from None
    if not isinstance(data, dict):
        raise ProbeError(f"{p}: not a speclab probe")
    if beyond:
        raise ProbeError(f"{p}: malformed probe ({', '.join(sorted(set(map(str, beyond))))} in it)")
    return p, data


def load(path: str | Path) -> Probe:
    """A probe file, or the probe.json inside a run directory. A surface
    file is refused with what reads it: a run prices at one depth."""
    p, data = _read(path)
    if data.get("kind") == SURFACE_KIND:
        raise ProbeError(f"{p}: a probe surface of several KV depths; `lab predict --probe` reads it, "
                         "a run's probe is one depth (`lab probe` without --depths)")
    return Probe.from_json(data, str(p))


def load_surface(path: str | Path) -> Surface:
    """A surface file, or one probe file as a surface of its one depth."""
    p, data = _read(path)
    if data.get("kind") != SURFACE_KIND:
        return Surface((Probe.from_json(data, str(p)),))
    return Surface.from_json(data, str(p))


def save_surface(surface: Surface, path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    from lab.base.strictjson import dumps

    p.write_text(dumps(surface.to_json(), indent=1) + "\n", encoding="utf-8")
    return p


SURFACE_KIND = "speclab.probe-surface"
SURFACE_VERSION = 1


@dataclass(frozen=True)
class Surface:
    """T(w) at several KV depths of one stack, shallowest first; each depth's
    T(w) is relative to its own one-row pass, :meth:`relative` to the
    shallowest's."""

    probes: tuple[Probe, ...]

    def __post_init__(self) -> None:
        if not self.probes:
            raise ProbeError("a probe surface needs at least one depth")
        if len(self.probes) > 1:
            depths = [p.kv_depth for p in self.probes if p.kv_depth is not None]
            if len(depths) != len(self.probes):
                raise ProbeError("a probe surface of several probes needs the KV depth of each")
            if depths != sorted(set(depths)):
                raise ProbeError(f"a probe surface's depths must rise, each once, got {depths}")
            first = self.probes[0]
            for p in self.probes[1:]:
                if (p.backend, p.model, p.method) != (first.backend, first.model, first.method):
                    raise ProbeError(f"a probe surface holds one stack: {first.backend} / {first.model} by "
                                     f"{first.method}, not also {p.backend} / {p.model} by {p.method}")

    @property
    def depths(self) -> tuple[int | None, ...]:
        return tuple(p.kv_depth for p in self.probes)

    @cached_property
    def trust(self) -> probe_rules.Trust:
        """The rules over every depth (a pass rising with depth among them),
        with what the driver re-measured (:mod:`lab.base.probe_rules`)."""
        curves = [probe_rules.Curve(p.kv_depth, p.widths, p.seconds) for p in self.probes]
        first = self.shallowest
        return probe_rules.judge(curves, first.notes.get(probe_rules.CHECKS), first.prices_steps)

    def require_trusted(self) -> None:
        if not self.trust.trusted:
            raise UntrustedProbe(self.trust.reason)

    @property
    def shallowest(self) -> Probe:
        return self.probes[0]

    def widths(self) -> tuple[int, ...]:
        """The widths every depth measured."""
        common = set(self.probes[0].widths)
        for p in self.probes[1:]:
            common &= set(p.widths)
        return tuple(sorted(common))

    def relative(self, probe: Probe, w: int) -> float:
        """A pass of w rows at ``probe``'s depth in one-row passes at the
        shallowest depth: its T(w) times how much slower its one-row pass is
        (so the shallowest depth reads its own T(w), the median of ratios)."""
        return (probe.t_ratio(w) or 0.0) * probe.pass_seconds(1) / self.shallowest.pass_seconds(1)

    def to_json(self) -> dict[str, Any]:
        return {"kind": SURFACE_KIND, "version": SURFACE_VERSION, "depths": list(self.depths),
                "probes": [p.to_json() for p in self.probes]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "surface") -> Surface:
        if data.get("version") != SURFACE_VERSION:
            raise ProbeError(f"{where}: surface version {_shown(data.get('version'))}, this lab reads {SURFACE_VERSION}")
        got = data.get("probes")
        if not isinstance(got, list) or not all(isinstance(d, dict) for d in got):
            raise ProbeError(f"{where}: malformed probe surface (probes must be a list of probes)")
        return cls(tuple(Probe.from_json(d, f"{where} depth {i + 1}") for i, d in enumerate(got)))


def find(run_dir: str | Path) -> Probe | None:
    """The probe saved in a run directory, if any."""
    p = rundir.run_file(run_dir, PROBE_FILE)
    return load(p) if p.exists() else None


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


def needed_widths(n_maxes: Sequence[int]) -> tuple[int, ...]:
    """Widths a profile's n_max values need (1 .. max n_max + 1), plus a few
    beyond so the prediction can say whether a larger n_max would pay."""
    top = max([*n_maxes, 1]) + 1
    extra = {top + 2, min(2 * top, top + 16)}
    return tuple(sorted(set(range(1, top + 1)) | extra))


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
    def number(name: str) -> int:
        n = rundir.plain_name(name).removeprefix("probe-").removesuffix(".json")
        return int(n) if n.isdigit() else 0

    names = {rundir.plain_name(f.name) for f in d.glob("probe-*.json*")
             if rundir.plain_name(f.name).endswith(".json")}
    return [first] + [load(rundir.run_file(d, n)) for n in sorted(names, key=number)]
