"""A probe's repeats: cycles of every width (and every KV depth, in turn),
each a short block of passes per width in an order that turns by one each
cycle, so that a slow spell of the machine lands on every width alike;
cycles go on until every T(w) is stable, within caps in cycles and seconds.
Then the rules of :mod:`lab.base.probe_rules`: widths that break one are
measured again, and the verdict goes into the curve's notes."""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Sequence

from lab.base import probe_rules
from lab.base.probe import PRICES_STEPS, ProbeError, ProbeWidthCap, ProbeWidthsFailed, format_widths

# Cycles at least (the spread of fewer says nothing), at most, and the seconds of
# cycles after which no new one starts (short of the fewest only where reaching them
# would take three times as long); a cycle times a block of passes of every width at
# every depth, widths in an order that turns by one each cycle.
MIN_CYCLES = 3
MAX_CYCLES = 12
MAX_SECONDS = 30.0
# Stable: every T(w)'s interval (lab.base.probe_rules) within this of its median either side.
STABLE = 0.03


def turned(widths: Sequence[int], k: int) -> list[int]:
    """``widths`` started at its k-th (cycle k's order): no width always
    follows the same one, so a slow spell lands on each in turn."""
    ws = list(widths)
    if not ws:
        return ws
    k %= len(ws)
    return ws[k:] + ws[:k]


class Cycles:
    """One probe's passes: per depth, per cycle, seconds by width. Widths a
    backend caps (:class:`ProbeWidthCap`) or that fail to run
    (:class:`ProbeWidthsFailed`) leave the curve, and the notes say why."""

    def __init__(self, timed: Callable[[Sequence[int], int | None], list[float]],
                 notes_now: Callable[[], dict[str, Any]], widths: tuple[int, ...], depths: tuple[int | None, ...],
                 say: Callable[[str], None], method: str, least: int, most: int, seconds: float) -> None:
        self.timed, self.notes_now, self.say, self.method = timed, notes_now, say, method
        self.widths = list(widths)
        self.depths = depths
        self.least, self.most, self.budget = least, most, seconds
        self.rows: list[list[dict[int, float]]] = [[] for _ in depths]
        self.backend_notes: list[dict[str, Any]] = [{} for _ in depths]
        self.failed: dict[int, str] = {}
        self.capped: str | None = None
        self.stopped = ""
        self.checks: dict[str, Any] = {}

    @property
    def steps(self) -> bool:
        """Whether the figures are whole steps (a server's), which no ceiling bounds."""
        return any(n.get("prices") == PRICES_STEPS for n in self.backend_notes)

    @property
    def done(self) -> int:
        return min(len(r) for r in self.rows)

    def _call(self, ws: list[int], k: int) -> dict[int, float]:
        depth = self.depths[k]
        try:
            got = self.timed(ws, depth)
        except ProbeWidthCap as cap:
            # measure what the stack can verify; the prediction stops where the probe did
            kept = [w for w in self.widths if w <= cap.max_width]
            if self.done > 0 or any(self.rows) or len(kept) < 2:
                raise
            self.widths, self.capped = kept, f"widths to {cap.max_width}: {cap.why}"
            self.say(f"{self.capped}; measuring widths {format_widths(kept)}")
            ws = [w for w in ws if w in kept]
            got = self.timed(ws, depth)
        except ProbeWidthsFailed as failed:
            ran = {w: s for w, s in failed.seconds.items() if w in ws}
            if 1 not in ran or len(ran) < 2:
                raise
            self.failed.update(failed.failed)
            self.say(f"widths {format_widths(sorted(failed.failed))} did not run; the curve keeps "
                     f"{format_widths(sorted(ran))}")
            self.widths = [w for w in self.widths if w not in failed.failed]
            self.backend_notes[k] = failed.notes or self.notes_now()
            return ran
        if len(got) != len(ws):
            raise ProbeError(f"the backend returned {len(got)} timings for {len(ws)} widths")
        self.backend_notes[k] = self.notes_now()
        return {w: float(s) for w, s in zip(ws, got)}

    def _cycle(self, ws: Sequence[int], r: int) -> list[dict[int, float]]:
        """Cycle ``r`` over ``ws``: every depth (in turn, the shallowest first
        on even cycles), each a block of passes of every width."""
        order = turned(ws, r)
        ks = list(range(len(self.depths)))
        if r % 2:
            ks.reverse()
        got: dict[int, dict[int, float]] = {}
        for k in ks:
            got[k] = self._call([w for w in order if w in self.widths], k)
        return [got[k] for k in range(len(self.depths))]

    def _prune(self) -> None:
        keep = set(self.widths)
        for per_depth in self.rows:
            for row in per_depth:
                for w in [w for w in row if w not in keep]:
                    del row[w]

    def curves(self) -> list[probe_rules.Curve]:
        ws = tuple(self.widths)
        return [probe_rules.Curve(self._depth_of(k), ws, tuple(tuple(row[w] for w in ws) for row in self.rows[k]))
                for k in range(len(self.depths))]

    def _depth_of(self, k: int) -> int | None:
        """The KV depth the passes ran at: the one asked, else the prefix the backend names."""
        depth = self.depths[k]
        if depth is not None:
            return depth
        prefix = self.backend_notes[k].get("prefix_tokens")
        return prefix if isinstance(prefix, int) and not isinstance(prefix, bool) else None

    def run(self) -> None:
        """Cycles until every T(w) is stable (at least ``least``), or ``most``
        cycles, or ``budget`` seconds of cycles; ``stopped`` says which."""
        t0 = time.perf_counter()
        at = [f" at KV depth {d}" if d is not None else "" for d in self.depths]
        where = at[0] if len(at) == 1 else f" at {len(at)} KV depths in turn"
        while True:
            r = self.done
            self.say(f"cycle {r + 1}: widths {format_widths(self.widths)} by {self.method}{where}")
            row = self._cycle(self.widths, r)
            for k, got in enumerate(row):
                self.rows[k].append(got)
            self._prune()
            n = self.done
            spent = time.perf_counter() - t0
            steady = probe_rules.stable(self.curves(), STABLE)
            cycles = f"{n} cycle{'s' if n > 1 else ''} of every width"
            within = f"each T(w) within ±{STABLE * 100:.0f}% of its median"
            if n >= self.least and steady:
                self.stopped = f"{cycles}, {within}"
                return
            # the seconds cap stops short of the fewest cycles only where reaching them would take three caps
            if n >= self.most or (spent >= self.budget and (n >= self.least or spent / n * self.least > 3 * self.budget)):
                cap = "the most a probe runs" if n >= self.most else f"{spent:.0f} s, the most a probe spends"
                self.stopped = f"{cycles} ({cap}), " + (within if steady else f"not yet {within}")
                return

    def check_and_remeasure(self) -> None:
        """The rules on what was measured; where a median breaks one, the
        offending widths measured again (as many cycles, each scaled to its
        own cycle's one-row pass) and the rules read again, within the noise.
        A breach of a rule an engine can break
        (:data:`lab.base.probe_rules.ENGINE_RULES`) that the second measurement
        repeats is the engine's; any other left, or a median still past a rule
        by more than :data:`lab.base.probe_rules.SETTLE`, is a refusal, kept in
        ``checks`` for every depth's curve."""
        # measured again where a median breaks a rule (beyond the floor), refused only where the spread does too
        first = probe_rules.breaches(self.curves(), self.steps, medians=True)
        if not first or not self.done:
            return
        again = sorted({1} | {w for b in first for w in b.widths if w in self.widths})
        wider = [w for w in again if w > 1]
        self.say("the curve breaks " + "; ".join(b.text for b in first) +
                 f": measuring width{'s' if len(wider) > 1 else ''} {format_widths(wider)} again")
        first_t = self._t_figures(again)
        # the backend's notes stay the full measurement's, not the narrower second one's
        notes = [dict(n) for n in self.backend_notes]
        n = self.done
        fresh: list[list[dict[int, float]]] = [[] for _ in self.depths]
        t0 = time.perf_counter()
        for r in range(n):
            if r and time.perf_counter() - t0 >= self.budget:
                break
            for k, got in enumerate(self._cycle(again, r)):
                fresh[k].append(got)
        self.backend_notes = notes
        # as many cycles as the second measurement finished, each width scaled to its cycle's one-row pass
        m = min(len(f) for f in fresh)
        self.rows = [rows[:m] for rows in self.rows]
        for k, rows in enumerate(self.rows):
            for r, row in enumerate(rows):
                new = fresh[k][r]
                for w in wider:
                    if 1 in new and w in new and w in row:
                        row[w] = new[w] * row[1] / new[1]
        self._prune()
        second_t = self._t_figures(again)
        # a breach of a rule an engine can break, beyond the spread, found both times with every width's figure
        # agreeing, is the engine's; the other breaches refuse the curve, and so does a median measured twice that
        # still breaks a rule by more than SETTLE inside a wide spread
        found_first = {_key(b) for b in first}
        strict = probe_rules.breaches(self.curves(), self.steps)
        repeated: list[probe_rules.Breach] = []
        unrepeated: list[str] = []
        for b in strict:
            if b.rule not in probe_rules.ENGINE_RULES:
                continue
            pairs = [(first_t.get((b.depth, w)), second_t.get((b.depth, w))) for w in b.widths]
            agree = [one is not None and two is not None and one.lo <= two.hi and two.lo <= one.hi for one, two in pairs]
            if _key(b) in found_first and all(agree):
                repeated.append(b)
                continue
            at = f" at KV depth {b.depth}" if b.depth is not None else ""
            moved = ", ".join(f"T({w}){at} {one.words()} then {two.words()}" for w, (one, two), ok in
                              zip(b.widths, pairs, agree) if one is not None and two is not None and not ok)
            if moved:
                unrepeated.append(moved)
        kept = {_key(b) for b in repeated}
        broken = {_key(b) for b in strict}
        unsettled = [b for b in probe_rules.breaches(self.curves(), self.steps, medians=True, floor=probe_rules.SETTLE)
                     if _key(b) not in broken]
        self.checks = {
            "remeasured": {"widths": wider, "because": [b.text for b in first], "first": _figure_table(first_t),
                           "again": _figure_table(second_t), "cycles": m},
            "repeated": [probe_rules.key_json(b) for b in repeated],
        }
        still = [b for b in strict if _key(b) not in kept]
        if still or unsettled:
            # every depth's curve carries the verdict on all of them
            said = probe_rules.summary(still + unsettled)
            if unsettled:
                said += (f"; measured twice, medians still break {'a rule' if len(unsettled) == 1 else 'rules'} by "
                         f"more than {probe_rules.SETTLE * 100:.0f}% where the repeats spread too wide to settle them")
            if unrepeated:
                said += ("; measured twice, they disagree beyond their noise (the machine's load, not the engine): "
                         + "; ".join(unrepeated[:2]) + (f" and {len(unrepeated) - 2} more" if len(unrepeated) > 2 else ""))
            self.checks["refused"] = said
        if m < n:
            self.stopped += f"; {m} of them kept, as many as the second measurement finished"

    def _t_figures(self, widths: Sequence[int]) -> dict[tuple[int | None, int], probe_rules.Figure]:
        out: dict[tuple[int | None, int], probe_rules.Figure] = {}
        for c in self.curves():
            for w in widths:
                if w in c.widths and c.seconds:
                    out[(c.depth, w)] = c.t(w)
        return out

    def curve_parts(self, k: int) -> tuple[tuple[int, ...], tuple[tuple[float, ...], ...], dict[str, Any]]:
        """Depth k's widths, seconds per cycle and notes (the backend's, the
        repeats', the widths left out, the checks)."""
        ws = tuple(self.widths)
        seconds = tuple(tuple(row[w] for w in ws) for row in self.rows[k])
        notes: dict[str, Any] = dict(self.backend_notes[k])
        notes["stopped"] = self.stopped or f"{len(seconds)} cycles"
        notes["cycles"] = len(seconds)
        if self.capped:
            notes["widths_capped"] = self.capped
        if self.failed:
            notes["widths_failed"] = {str(w): why for w, why in sorted(self.failed.items())}
        notes[probe_rules.CHECKS] = dict(self.checks)
        return ws, seconds, notes


def _figure_table(figures: Mapping[tuple[int | None, int], probe_rules.Figure]) -> list[list[Any]]:
    """[[depth, w, lo, median, hi], ...] for the notes."""
    return [[d, w, round(f.lo, 4), round(f.mid, 4), round(f.hi, 4)] for (d, w), f in sorted(
        figures.items(), key=lambda kv: (kv[0][0] or 0, kv[0][1]))]


def _key(b: probe_rules.Breach) -> tuple[str, int | None, tuple[int, ...]]:
    return b.rule, b.depth, b.widths
