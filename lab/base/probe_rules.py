"""The rules a verify-cost curve keeps on any machine, checked within the
noise its own repeats show, and whether the curve can be trusted.

T(w) is one pass of w rows over one pass of one row, each repeat (a cycle
of every width) divided by its own one-row pass:

- T(1) = 1;
- T rises with w: a pass of more rows is never cheaper (T(w) >= 1 too);
- a pass rises with KV depth: more cache to attend to is never cheaper
  (checked on the passes' seconds, repeat by repeat; T read against each
  depth's own one-row pass may fall with depth where T(w) > w);
- T(w) <= w: a batch of w costs no more than w one-row passes.

The first and third hold for any engine. The other two say what an engine
could do (pad w rows to a cheaper wider pass, run w one-row passes), not
what it does: an engine can break them for real (llama.cpp on a CPU
computes the logits of every row of a verify, and at one thread a pass of 2
rows cost 2.5 of one here; a kernel chosen by batch size can make a wider
pass cheaper). A breach of those two that measuring again repeats is kept
as the engine's (:data:`ENGINE_RULES`) and said; any other is refused.

A figure's noise is the interval of its median over the repeats: order
statistics either side that hold the median at least :data:`COVERAGE` of
the time whatever the distribution, never narrower than :data:`NOISE_FLOOR`
either side (:data:`FEW_REPEATS_FLOOR` under :data:`FEW_REPEATS` repeats,
whose spread says little). A rule is broken only where the intervals do
not meet."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

COVERAGE = 0.9
NOISE_FLOOR = 0.02
FEW_REPEATS = 3
FEW_REPEATS_FLOOR = 0.05

ONE = "one"  # T(1) = 1
RISING = "rising"  # T non-decreasing in w
DEPTH = "depth"  # a pass non-decreasing in KV depth
CEILING = "ceiling"  # T(w) <= w

# how far a median measured twice may still break a rule inside a wide spread before the
# curve is refused as unsettled (a few percent is a wide spread's rounding, a tenth is not)
SETTLE = 0.10

# the rules an engine can break for real: a breach the second measurement repeats is kept
ENGINE_RULES = (RISING, CEILING)

# notes["checks"] of a probe the driver checked: what it re-measured and why,
# the breaches the re-measure repeated ([rule, depth, widths] each), a refusal of its own
CHECKS = "checks"


@dataclass(frozen=True)
class Figure:
    """A median over repeats with its interval, floor included."""

    lo: float
    mid: float
    hi: float

    def words(self, digits: int = 2) -> str:
        return f"{self.mid:.{digits}f} ({self.lo:.{digits}f}-{self.hi:.{digits}f})"

    @property
    def half_width(self) -> float:
        """The interval's larger side, relative to the median."""
        return max(self.mid - self.lo, self.hi - self.mid) / self.mid if self.mid else math.inf


def _binomial_below(k: int, n: int) -> float:
    """P(X < k) for X ~ Binomial(n, 1/2)."""
    return sum(math.comb(n, i) for i in range(k)) / 2 ** n


def median_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """(lo, median, hi): the innermost order statistics x_(k), x_(n-k+1) that
    hold the median at least :data:`COVERAGE` of the time (min and max where
    no pair does, as with fewer than five repeats)."""
    xs = sorted(values)
    n = len(xs)
    if not n:
        raise ValueError("no repeats")
    k = 1
    for j in range(1, n // 2 + 1):
        if 1 - 2 * _binomial_below(j, n) >= COVERAGE:
            k = j
    return xs[k - 1], statistics.median(xs), xs[n - k]


def floor_for(repeats: int) -> float:
    return FEW_REPEATS_FLOOR if repeats < FEW_REPEATS else NOISE_FLOOR


def figure(values: Sequence[float], floor: float | None = None, medians: bool = False) -> Figure:
    """The median of ``values`` with its interval, at least ``floor``
    (relative) either side (:func:`floor_for` of their count when None);
    ``medians``: the floor alone, as a suspicion reads a median."""
    lo, mid, hi = median_interval(values)
    f = floor_for(len(values)) if floor is None else floor
    if medians:
        lo = hi = mid
    return Figure(min(lo, mid * (1 - f)), mid, max(hi, mid * (1 + f)))


@dataclass(frozen=True)
class Curve:
    """One depth's passes: seconds per repeat per width (widths rising, 1 first)."""

    depth: int | None
    widths: tuple[int, ...]
    seconds: tuple[tuple[float, ...], ...]

    def ratios(self, w: int) -> list[float]:
        i = self.widths.index(w)
        return [rep[i] / rep[0] for rep in self.seconds]

    def t(self, w: int, medians: bool = False, floor: float | None = None) -> Figure:
        return figure(self.ratios(w), floor if medians else None, medians=medians)

    def at(self) -> str:
        return f" at KV depth {self.depth}" if self.depth is not None else ""


@dataclass(frozen=True)
class Breach:
    rule: str
    widths: tuple[int, ...]  # the widths to measure again
    text: str
    depth: int | None = None
    severity: float = 0.0  # how far past its noise: the worst is named first



# each rule's breach in words, as a reason opens with it
RULE_WORDS = {
    ONE: "T(1) is not 1",
    CEILING: "above the T(w) = w line (a pass of w rows dearer than w one-row passes)",
    RISING: "falling as w rises (a pass of more rows cheaper than one of fewer)",
    DEPTH: "falling with KV depth (a pass over more cache cheaper)",
}


def breaches(curves: Sequence[Curve], steps: bool = False, medians: bool = False,
             floor: float | None = None) -> list[Breach]:
    """Every rule the curves break beyond their noise; ``steps``: figures
    are whole steps, draft inside (a server's), which no ceiling bounds;
    ``medians``: the medians read beyond ``floor`` alone (the noise floor
    where None), what is worth measuring again though the repeats' spread
    cannot refuse it."""
    out: list[Breach] = []
    for c in curves:
        if not c.seconds or 1 not in c.widths:
            out.append(Breach(ONE, (1,), f"no one-row pass{c.at()}", c.depth, math.inf))
            continue
        # decided on ``t``, said with the repeats' own interval
        t = {w: c.t(w, medians, floor) for w in c.widths}
        said = {w: c.t(w) for w in c.widths}
        if abs(t[1].mid - 1) > 1e-9:
            out.append(Breach(ONE, (1,), f"T(1) = {t[1].mid:.3f}{c.at()}", c.depth, abs(t[1].mid - 1)))
        for b in c.widths:
            # the pass below b that is dearer than b beyond both their noise by the most
            worse = [a for a in c.widths if a < b and t[a].lo > t[b].hi]
            if worse:
                a = max(worse, key=lambda x: t[x].lo)
                out.append(Breach(RISING, (a, b), f"T({b}) = {said[b].words()} under T({a}) = {said[a].words()}{c.at()}",
                                  c.depth, t[a].lo / t[b].hi))
            if not steps and b > 1 and t[b].lo > b:
                out.append(Breach(CEILING, (b,), f"T({b}) = {said[b].words()}{c.at()}", c.depth, t[b].lo / b))
    out += _depth_breaches(curves, medians, floor)
    return out


def _depth_breaches(curves: Sequence[Curve], medians: bool = False, floor: float | None = None) -> list[Breach]:
    """A pass at the deeper of two depths cheaper than at the shallower,
    repeat by repeat where both have as many (a cycle timed both), else
    median against median."""
    out: list[Breach] = []
    placed = sorted((c for c in curves if c.depth is not None), key=lambda c: c.depth or 0)
    for shallow, deep in zip(placed, placed[1:]):
        paired = len(shallow.seconds) == len(deep.seconds)
        for w in (w for w in shallow.widths if w in deep.widths):
            i, j = shallow.widths.index(w), deep.widths.index(w)
            f = _deeper_over_shallower(shallow.seconds, deep.seconds, i, j, paired, medians, floor)
            said = _deeper_over_shallower(shallow.seconds, deep.seconds, i, j, paired, False, None)
            if f.hi < 1:
                out.append(Breach(DEPTH, (w,), f"{w} row{'s' if w > 1 else ''} at KV depth {deep.depth} took "
                                               f"{said.words()} of their time at {shallow.depth}", deep.depth, 1 / f.hi))
    return out


def _deeper_over_shallower(shallow: Sequence[Sequence[float]], deep: Sequence[Sequence[float]], i: int, j: int,
                           paired: bool, medians: bool, floor: float | None) -> Figure:
    f = floor if medians else None
    if paired:
        return figure([d[j] / s[i] for s, d in zip(shallow, deep)], f, medians=medians)
    a = figure([s[i] for s in shallow], f, medians=medians)
    b = figure([d[j] for d in deep], f, medians=medians)
    return Figure(b.lo / a.hi, b.mid / a.mid, b.hi / a.lo)


def summary(found: Sequence[Breach], most: int = 2) -> str:
    """The breaches by rule, the worst ``most`` of each named and the rest counted."""
    parts = []
    for rule in (ONE, CEILING, RISING, DEPTH):
        group = sorted((b for b in found if b.rule == rule), key=lambda b: -b.severity)
        if group:
            named = ", ".join(b.text for b in group[:most])
            rest = f" and {len(group) - most} more" if len(group) > most else ""
            parts.append(f"{RULE_WORDS[rule]}: {named}{rest}")
    return "; ".join(parts)


def stable(curves: Sequence[Curve], within: float) -> bool:
    """Whether every T(w) of every curve (w > 1) has an interval, before any
    floor, within ``within`` of its median either side (never with one repeat)."""
    for c in curves:
        if len(c.seconds) < 2:
            return False
        for w in c.widths[1:]:
            f = figure(c.ratios(w), floor=0.0)
            if f.half_width > within:
                return False
    return True


@dataclass(frozen=True)
class Trust:
    """The verdict on a curve: ``refused`` the rules it breaks beyond noise
    (then no prediction may use it), ``engine`` the T(w) > w breaches a
    re-measure repeated (kept: the engine's, said), ``remeasured`` what was
    measured again."""

    refused: tuple[Breach, ...] = ()
    engine: tuple[Breach, ...] = ()
    remeasured: tuple[int, ...] = ()
    # a refusal the driver made that the curve's own figures do not show (a run of several depths)
    said: str | None = None
    checked: bool = True  # False: a file from before probes were checked, never re-measured
    notes: Mapping[str, Any] = field(default_factory=dict)

    @property
    def trusted(self) -> bool:
        return not self.refused and self.said is None

    @property
    def reason(self) -> str:
        """Why the curve is refused ("" when it is not)."""
        if self.trusted:
            return ""
        # the driver's words cover every depth of the measurement; a file's own figures say the rest
        text = self.said or summary(self.refused)
        if self.remeasured:
            text += f" (after measuring width{'s' if len(self.remeasured) > 1 else ''} " \
                    f"{', '.join(map(str, self.remeasured))} again)"
        elif not self.checked:
            text += " (measured before the lab re-measured such widths)"
        return text


def judge(curves: Sequence[Curve], checks: Mapping[str, Any] | None, steps: bool = False) -> Trust:
    """The verdict on ``curves`` given the driver's ``checks`` (None: a
    probe saved before the lab checked probes)."""
    found = breaches(curves, steps)
    info = checks if isinstance(checks, Mapping) else {}
    repeated = set(_keys(info.get("repeated")))
    engine = tuple(b for b in found if b.rule in ENGINE_RULES and _key(b) in repeated)
    refused = tuple(b for b in found if b not in engine)
    said = info.get("refused")
    again = info.get("remeasured")
    widths = tuple(sorted({int(w) for w in again.get("widths", ())})) if isinstance(again, Mapping) else ()
    return Trust(refused, engine, widths, said if isinstance(said, str) and said else None,
                 checked=isinstance(checks, Mapping), notes=info)


def _key(b: Breach) -> tuple[str, int | None, tuple[int, ...]]:
    return b.rule, b.depth, b.widths


def key_json(b: Breach) -> list[Any]:
    """A breach as the notes keep it: [rule, depth, widths]."""
    return [b.rule, b.depth, list(b.widths)]


def _keys(value: Any) -> list[tuple[str, int | None, tuple[int, ...]]]:
    out: list[tuple[str, int | None, tuple[int, ...]]] = []
    for item in value if isinstance(value, list) else ():
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str) and isinstance(item[2], list)):
            continue
        depth = item[1] if isinstance(item[1], int) and not isinstance(item[1], bool) else None
        if all(isinstance(w, int) and not isinstance(w, bool) for w in item[2]):
            out.append((item[0], depth, tuple(item[2])))
    return out
