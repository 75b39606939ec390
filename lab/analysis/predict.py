"""Predict before measuring: the speedup an arm should get at each n_max.

A step drafting n costs C(n) = T(n + 1) + n * draft cost + loop cost, in
baseline tokens (from the probe's T(w) and the row's measured costs), and
lands L(n) = 1 + sum_k prod_{i<=k} p_i tokens; with q the plain share,

    speedup(n) = (q + (1 - q) L(n)) / (q + (1 - q) C(n)).

docs/design-notes.md derives every term and the measured extras."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

from lab.analysis.measured_acceptance import PositionAcceptance
from lab.base.probe import Probe


@dataclass(frozen=True)
class Prediction:
    n_max: int
    landed: float  # expected tokens per step
    verify_cost: float  # T(n + 1), baseline tokens
    draft_cost: float  # baseline tokens per step
    speedup: float
    extrapolated: int  # draft positions with no acceptance data
    loop_cost: float = 0.0  # the loop's own seconds per step, baseline tokens
    # a whole step's cost, draft and loop inside (a step-priced probe)
    step_priced: bool = False
    # share of drafts kept, where verify_cost lies between the probe's none-kept and all-kept steps
    kept_share: float | None = None
    # graph rebuilds of passes that switch width, per step, baseline tokens
    switch_cost: float = 0.0
    # the part of draft_cost that is the draft's catch-up after a step that kept all
    catch_up_cost: float = 0.0
    # baseline tokens a cell's first passes cost beyond steady ones: this arm's, its baseline's
    cell_start: float = 0.0
    baseline_cell_start: float = 0.0
    depth: float | None = None  # the KV depth T(w) was read at (ArmInputs.depth), on a probe of two depths

    @property
    def cost(self) -> float:
        return self.verify_cost + self.draft_cost + self.loop_cost + self.switch_cost


@dataclass(frozen=True)
class ArmInputs:
    """What the prediction needs from an arm's measured rows."""

    baseline_token_s: float
    draft_s_per_token: float
    plain_share: float
    n_max: int | None
    loop_s_per_step: float = 0.0
    # shares of all passes: steps after another width, plain decodes after a step
    switch_in_share: float = 0.0
    switch_out_share: float = 0.0
    # shares of all passes: the pass right after such a switch (a step, a plain decode)
    second_in_share: float = 0.0
    second_out_share: float = 0.0
    # tokens a cell's passes decode (all but the prompt's), mean over rows; 0: not known
    cell_tokens: float = 0.0
    # the draft's catch-up seconds (after a step that kept all) and their part of draft_s_per_token
    catch_up_s: float = 0.0
    catch_up_per_token: float = 0.0
    depth: float | None = None  # :func:`rows_depth`


@dataclass(frozen=True)
class CatchUp:
    """The draft's catch-up: extra seconds in a step after one that kept all."""

    seconds: float  # c: extra draft seconds of such a step
    after_full: int  # steps that followed a step that kept all
    steps: int  # steps with draft seconds


# steps of each kind, at the same drafted length, before a difference is read
_CATCH_UP_MIN = 5


def after_steps(steps: Sequence[Mapping[str, Any]]) -> Iterator[tuple[tuple[Any, Any, Any], bool, Mapping[str, Any]]]:
    """Every drafting step but a cell's first, in run order, with whether the
    step before kept all its drafts: ((arm, prompt, round), kept all before, step)."""
    runs: dict[tuple[Any, Any, Any], list[Mapping[str, Any]]] = {}
    for s in steps:
        if s.get("drafted"):
            runs.setdefault((s.get("arm"), s.get("prompt"), s.get("round")), []).append(s)
    for key, seq in runs.items():
        seq.sort(key=lambda s: int(s.get("index") or 0))
        for prev, cur in zip(seq, seq[1:]):
            yield key, int(prev["accepted"]) >= int(prev["drafted"]) > 0, cur


def catch_up(steps: Sequence[Mapping[str, Any]]) -> CatchUp | None:
    """c from arms' steps: mean draft seconds after a step that kept all less
    after one that did not, at each arm's most common drafted length,
    weighted by the fewer of the two counts; None without enough of both.
    Below zero (noise) reads as none."""
    timed = [s for s in steps if s.get("draft_s") is not None]
    pairs = [(key[0], full, int(cur["drafted"]), float(cur["draft_s"])) for key, full, cur in after_steps(timed)]
    if not pairs:
        return None
    lengths: dict[Any, dict[int, int]] = {}
    for arm, _full, drafted, _secs in pairs:
        counts = lengths.setdefault(arm, {})
        counts[drafted] = counts.get(drafted, 0) + 1
    by_arm: dict[Any, dict[bool, list[float]]] = {}
    for arm, full, drafted, secs in pairs:
        if drafted == max(lengths[arm], key=lambda d: lengths[arm][d]):
            by_arm.setdefault(arm, {True: [], False: []})[full].append(secs)
    weighted = weight = 0.0
    for kinds in by_arm.values():
        n = min(len(kinds[True]), len(kinds[False]))
        if n < _CATCH_UP_MIN:
            continue
        diff = sum(kinds[True]) / len(kinds[True]) - sum(kinds[False]) / len(kinds[False])
        weighted += n * diff
        weight += n
    if not weight:
        return None
    after_full = sum(1 for _arm, full, _d, _s in pairs if full)
    return CatchUp(max(0.0, weighted / weight), after_full, sum(1 for s in timed if s.get("drafted")))


def arm_inputs(rows: Sequence[Mapping[str, Any]], records: Sequence[Mapping[str, Any]] = ()) -> ArmInputs | None:
    """Pool the ok rounds of one arm x prompt (or several arms), ``records``
    read for the catch-up; None without steps or a baseline."""
    ok = [r for r in rows if r.get("status") == "ok" and r.get("steps") and r.get("step_cost_tokens")]
    if not ok:
        return None
    rounds = {(r.get("arm"), r.get("prompt"), r.get("round")) for r in ok}
    seen = catch_up([s for s in records if (s.get("arm"), s.get("prompt"), s.get("round")) in rounds])
    steps = sum(int(r["steps"]) for r in ok)
    drafted = sum(int(r["drafted"] or 0) for r in ok)
    draft_s = sum(float(r["draft_s"] or 0.0) * int(r["steps"]) for r in ok)
    token_s = sum(float(r["step_s"]) / float(r["step_cost_tokens"]) for r in ok) / len(ok)
    # The first token comes with the prompt, not from the loop.
    plain = sum(max(0, int(r.get("plain_tokens") or 0) - 1) for r in ok)
    # only rows whose loop reports the steps it spent them over
    reported = [r["engine_report"] for r in ok if isinstance(r.get("engine_report"), Mapping)
                and r["engine_report"].get("loop_steps") and r["engine_report"].get("loop_overhead_s") is not None]
    loop_steps = sum(int(e["loop_steps"]) for e in reported)
    loop_s = sum(max(0.0, float(e["loop_overhead_s"])) for e in reported)
    # a saved count that is not a count is damage: that row counts none
    passes = switch_in = switch_out = second_in = second_out = 0
    for r in ok:
        e = r.get("engine_report")
        if not isinstance(e, Mapping):
            continue
        into, out = saved_count(e.get("switch_steps")), saved_count(e.get("switch_plain"))
        if into is None or out is None:
            continue
        passes += int(r["steps"]) + max(0, int(r.get("plain_tokens") or 0) - 1)
        switch_in += into
        switch_out += out
        # rows from before the loop counted the passes after a switch count none of them
        second_in += saved_count(e.get("second_steps")) or 0
        second_out += saved_count(e.get("second_plain")) or 0
    return ArmInputs(
        baseline_token_s=token_s,
        draft_s_per_token=draft_s / drafted if drafted else 0.0,
        plain_share=plain / (plain + steps) if plain + steps else 0.0,
        n_max=ok[0].get("n_max"),
        loop_s_per_step=loop_s / loop_steps if loop_steps else 0.0,
        switch_in_share=switch_in / passes if passes else 0.0,
        switch_out_share=switch_out / passes if passes else 0.0,
        second_in_share=second_in / passes if passes else 0.0,
        second_out_share=second_out / passes if passes else 0.0,
        cell_tokens=_cell_tokens(ok),
        catch_up_s=seen.seconds if seen else 0.0,
        catch_up_per_token=seen.seconds * seen.after_full / drafted if seen and drafted else 0.0,
        depth=rows_depth(ok),
    )


def rows_depth(rows: Sequence[Mapping[str, Any]]) -> float | None:
    """Mean KV depth of ``rows``' passes: prompt plus half the output (None: not saved)."""
    got = [(saved_count(r.get("prompt_tokens")), saved_count(r.get("n_tokens"))) for r in rows]
    if not got or any(p is None or n is None for p, n in got):
        return None
    return sum(int(p or 0) + int(n or 0) / 2 for p, n in got) / len(got)


def _cell_tokens(rows: Sequence[Mapping[str, Any]]) -> float:
    """Tokens a cell's passes decoded, mean over rows (the first comes with
    the prompt); 0 where a row does not say."""
    counts = [saved_count(r.get("n_tokens")) for r in rows]
    if not counts or any(c is None for c in counts):
        return 0.0
    return sum(max(0, int(c or 0) - 1) for c in counts) / len(counts)


def saved_count(value: Any) -> int | None:
    """A loop's count as saved: an int of 0 or more, else None."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def predict(
    acceptance: PositionAcceptance, probe: Probe, inputs: ArmInputs, n_values: Sequence[int] | None = None,
) -> list[Prediction]:
    """Predictions for every n_max the probe covers (n + 1 <= widest width);
    :class:`lab.base.probe.UntrustedProbe` for a curve that breaks a rule no
    machine can (never priced with silently)."""
    probe.require_trusted()
    ns = list(n_values) if n_values is not None else list(range(1, max(probe.widths)))
    whole = probe.prices_steps
    # a step-priced probe's T(w) holds the draft and the loop already
    draft_per_token = 0.0 if whole else (inputs.draft_s_per_token - inputs.catch_up_per_token) / inputs.baseline_token_s
    catch_up_tokens = 0.0 if whole else inputs.catch_up_s / inputs.baseline_token_s
    loop_cost = 0.0 if whole else inputs.loop_s_per_step / inputs.baseline_token_s
    q = inputs.plain_share
    out = []
    for n in ns:
        landed, missing = acceptance.expected_landed(n)
        kept = (landed - 1) / n if whole and probe.kept_none_ratio(n + 1) is not None else None
        t = probe.t_ratio_at(n + 1, inputs.depth) if kept is None else probe.step_ratio(n + 1, kept)
        if t is None:
            continue
        catching_up = catch_up_tokens * acceptance.kept_all(n)
        draft_cost = n * draft_per_token + catching_up
        switching = 0.0 if whole else switch_cost(probe, n + 1, inputs)
        starts = None if whole else cell_starts(probe, n + 1, inputs)
        speedup = _speedup(landed, t + draft_cost + loop_cost + switching, q, starts, inputs.cell_tokens)
        starts = starts or (0.0, 0.0)
        out.append(Prediction(n, landed, t, draft_cost, speedup, missing, loop_cost, whole, kept, switching,
                              cell_start=starts[0], baseline_cell_start=starts[1], catch_up_cost=catching_up,
                              depth=inputs.depth if kept is None and probe.depth_span else None))
    return out


def _speedup(landed: float, step_cost: float, q: float, starts: tuple[float, float] | None, cell_tokens: float) -> float:
    """Tokens landed over their cost per pass (a plain decode one of each), and
    per cell where the cell's first passes are priced (``starts``)."""
    per_pass_landed = q + (1 - q) * landed
    per_pass_cost = q + (1 - q) * step_cost
    if starts is None:
        return per_pass_landed / per_pass_cost
    d = cell_tokens
    return (d + starts[1]) / (d * per_pass_cost / per_pass_landed + starts[0])


def with_verify_cost(p: Prediction, inputs: ArmInputs, verify_cost: float) -> float:
    """``p``'s speedup had its verify cost been ``verify_cost`` baseline
    tokens (the run's own, :mod:`lab.analysis.verify_gap`), all else as priced."""
    starts = (p.cell_start, p.baseline_cell_start) if p.cell_start or p.baseline_cell_start else None
    cost = verify_cost + p.draft_cost + p.loop_cost + p.switch_cost
    return _speedup(p.landed, cost, inputs.plain_share, starts, inputs.cell_tokens)


def cell_starts(probe: Probe, width: int, inputs: ArmInputs) -> tuple[float, float] | None:
    """Baseline tokens a cell pays for its first passes (the arm's, its
    baseline's), where the probe timed cells and the row gives its length."""
    if inputs.cell_tokens <= 0:
        return None
    base = probe.cell_start_ratio(1)
    own = base if inputs.plain_share >= 0.5 else probe.cell_start_ratio(width)
    return None if base is None or own is None else (own, base)


def switch_cost(probe: Probe, width: int, inputs: ArmInputs) -> float:
    """Baseline tokens per step of ``width`` rows for passes that switch width,
    at the probe's switching figures; 0 where either side has none."""
    q = inputs.plain_share
    if q >= 1 or not (inputs.switch_in_share or inputs.switch_out_share):
        return 0.0
    ratios = probe.switch_ratio(width)
    if ratios is None:
        return 0.0
    s_in, s_out = ratios
    c_in, c_out = probe.second_ratio(width) or (0.0, 0.0)
    return (inputs.switch_in_share * s_in + inputs.switch_out_share * s_out
            + inputs.second_in_share * c_in + inputs.second_out_share * c_out) / (1 - q)


def best(predictions: Sequence[Prediction]) -> Prediction | None:
    """The n_max with the highest predicted speedup, preferring the smaller
    n_max when two are within 1% (less memory, less to lose when wrong)."""
    if not predictions:
        return None
    top = max(p.speedup for p in predictions)
    return min((p for p in predictions if p.speedup >= top * 0.99), key=lambda p: p.n_max)


def probe_for(row: Mapping[str, Any], probes: Sequence[Probe]) -> tuple[Probe | None, bool]:
    """The probe that prices a row: the one taken for its arm's stack, else
    the first, flagged as not matching."""
    for p in probes:
        if p.prices_arm(row.get("arm", ""), row.get("backend"), row.get("model")):
            return p, True
    return (probes[0], False) if probes else (None, False)




# the least disagreement flagged: a few percent is two clocks on one machine
T1_FLOOR = 0.03


def t1_disagreement(baseline_rows: Sequence[Mapping[str, Any]], probe: Probe) -> str | None:
    """A note when the probe's T(1) and the run's baseline seconds per token
    disagree by more than the rounds' spread (at least :data:`T1_FLOOR`):
    measured under different conditions, a prediction is off by as much."""
    secs = sorted(1.0 / float(r["tok_per_s"]) for r in baseline_rows
                  if r.get("status") == "ok" and r.get("tok_per_s") and int(r.get("round", 1)) >= 1)
    width = 1 if 1 in probe.widths else min(probe.widths)
    if not secs or width != 1:
        return None
    mid = secs[len(secs) // 2] if len(secs) % 2 else (secs[len(secs) // 2 - 1] + secs[len(secs) // 2]) / 2
    spread = (secs[-1] - secs[0]) / mid
    t1 = probe.pass_seconds_at(1, rows_depth([r for r in baseline_rows if r.get("status") == "ok"]))
    gap = (t1 - mid) / mid
    if abs(gap) <= max(spread, T1_FLOOR):
        return None
    return (f"the probe's one-row pass took {t1 * 1000:.2f} ms but this run's baseline token took "
            f"{mid * 1000:.2f} ms ({gap * 100:+.0f}% apart, rounds spread {spread * 100:.0f}%): measured "
            "under different conditions, so the prediction is off by about as much")


# how wide a probe's T(w) interval may be, either side, before a row priced at w says so
PROBE_NOISE = 0.10


def probe_noise(probe: Probe, width: int) -> str | None:
    """A note when the probe's own repeats leave T(width) uncertain by more
    than :data:`PROBE_NOISE` either side (at any of its depths): the rules
    could not refuse it, and the prediction moves by as much."""
    if width not in probe.widths or len(probe.seconds) < 2:
        return None
    worst = max(((c.depth, c.t(width)) for c in probe.curves()), key=lambda dc: dc[1].half_width)
    depth, f = worst
    if f.half_width <= PROBE_NOISE:
        return None
    at = f" at KV depth {depth}" if depth is not None else ""
    return (f"its probe's T({width}){at} lies anywhere in {f.lo:.2f}-{f.hi:.2f} (±{f.half_width * 100:.0f}%) over its "
            f"{len(probe.seconds)} repeats: the machine moved under the probe, and the prediction moves with it")


# How far the draft's seconds per drafted token may move between one arm's
# cells (rounds and prompts, at one kind of step) before the report says so
DRIFT_FLOOR = 0.15
# the draft's median share of a step below which its drift is not worth a line
DRIFT_SHARE = 0.10
# steps of a kind a cell needs before its median counts
_DRIFT_MIN = 5


def draft_drift(steps: Sequence[Mapping[str, Any]], arm: str) -> str | None:
    """A note when one arm's draft seconds per token differ between cells
    by more than :data:`DRIFT_FLOOR` (held-out predictions move with it)."""
    mine = [s for s in steps if s.get("arm") == arm and s.get("draft_s") is not None
            and not (isinstance(s.get("round"), int) and s["round"] < 1)]
    cells: dict[tuple[Any, Any, Any], dict[bool, list[float]]] = {}
    for key, full, cur in after_steps(mine):
        cells.setdefault(key, {True: [], False: []})[full].append(float(cur["draft_s"]) / int(cur["drafted"]))
    medians: dict[bool, list[float]] = {True: [], False: []}
    for kinds in cells.values():
        for kind, xs in kinds.items():
            if len(xs) >= _DRIFT_MIN:
                xs.sort()
                medians[kind].append(xs[len(xs) // 2])
    spread = [(min(m), max(m)) for m in medians.values() if len(m) >= 2 and min(m) > 0]
    shares = sorted(float(s["draft_s"]) / float(s["step_s"]) for s in mine if s.get("drafted") and s.get("step_s"))
    # a draft that is a sliver of the step (an oracle's lookup) moves no prediction however it drifts
    if not spread or not shares or shares[len(shares) // 2] < DRIFT_SHARE:
        return None
    low, high = max(spread, key=lambda lh: lh[1] / lh[0])
    if high / low - 1 <= DRIFT_FLOOR:
        return None
    return (f"the draft's seconds per drafted token moved from cell to cell, {low * 1000:.2f} to "
            f"{high * 1000:.2f} ms (+{(high / low - 1) * 100:.0f}%, medians of like steps): the machine ran the "
            "draft at different speeds, and a prediction that takes these seconds for another arm (held out) "
            "moves with them")


# how far a row's decoding depth may lie from the probe's (ratio and tokens) unremarked
DEPTH_RATIO = 2.0
DEPTH_FLOOR = 512


def depth_disagreement(rows: Sequence[Mapping[str, Any]], probe: Probe) -> str | None:
    """A note when the row decoded at a KV depth (prompt plus half its
    tokens) far from the probe's (:attr:`lab.base.probe.Probe.kv_depth`):
    T(w) moves with depth (``lab probe --depths``); a probe of two depths
    (:attr:`lab.base.probe.Probe.depth_span`) reads it between them."""
    depth = probe.kv_depth
    mids = sorted(int(r["prompt_tokens"]) + int(r.get("n_tokens") or 0) // 2 for r in rows
                  if r.get("status") == "ok" and r.get("prompt_tokens") is not None)
    if depth is None or not mids:
        return None
    mid = mids[len(mids) // 2]
    span = probe.depth_span
    depth = min(max(mid, span[0]), span[1]) if span else depth
    if abs(mid - depth) < DEPTH_FLOOR or max(mid, depth) < DEPTH_RATIO * max(1, min(mid, depth)):
        return None
    return (f"its steps ran at a KV depth of about {mid} tokens but the probe's passes ran at {depth}: a pass, the "
            f"baseline token's included, and T(w) move with depth (lab probe --depths shows how much); "
            f"[run] probe_depth = {mid} prices them at theirs")
