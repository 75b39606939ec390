"""What each figure of a run plots, as plain data: pure functions over a
loaded run (:func:`lab.render.report.load_for_report`) that return the
series :mod:`lab.render.figures` draws, built from the same analysis the
report's tables print (:mod:`lab.analysis.run`), so a plotted point and a
printed number are one value. A figure whose data the run lacks comes back
as a reason instead of a series. The TUI's plots take their labels and
per-step series from here too."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from lab.analysis import run as analysis
from lab.analysis import stats
from lab.base import metrics

# Labels shared by the figures and the TUI's plots view.
T_AXIS = "T(w): verify cost in baseline tokens"
W_AXIS = "w: tokens verified in one pass"
SPEEDUP_AXIS = "speedup over its baseline (x)"
N_MAX_AXIS = "n_max (drafts per step)"
POSITION_AXIS = "draft position"
ACCEPTANCE_AXIS = "acceptance"
STEP_AXIS = "step"
STEP_COST_TITLE = "step cost (baseline tokens)"
STEP_COST_MS_TITLE = "step cost (ms, no baseline yet)"
LANDED_TITLE = "tokens landed per step"
MAX_YIELD_LABEL = "max yield"
STEPS_COUNT_AXIS = "steps"
TOK_RATE_TITLE = "tok/s over time"
CONDITIONAL_LABEL = "conditional: kept at i given i-1 kept"
UNCONDITIONAL_LABEL = "unconditional: kept at i of all drafting steps (llama.cpp, vLLM)"


@dataclass(frozen=True)
class ProbeCurve:
    """One probe's T(w): kept-all at every measured width (median over
    repeats, with min and max), and where a step-priced probe timed steps
    that kept none, those too."""

    label: str
    widths: tuple[int, ...]
    t: tuple[float, ...]
    t_min: tuple[float, ...]
    t_max: tuple[float, ...]
    kept_none_widths: tuple[int, ...] = ()
    kept_none: tuple[float, ...] = ()


@dataclass(frozen=True)
class SpeedupSeries:
    """One arm x prompt on the speedup-by-n_max figure."""

    arm: str
    prompt: str
    n_max: int | None
    measured: float | None
    rounds: tuple[float, ...]  # each paired round's speedup
    held_out: float | None = None
    curve_n_max: tuple[int, ...] = ()
    curve_speedup: tuple[float, ...] = ()
    curve_extrapolated: tuple[bool, ...] = ()


@dataclass(frozen=True)
class PositionSeries:
    arm: str
    prompt: str
    reached: tuple[int, ...]
    conditional: tuple[float | None, ...]
    unconditional: tuple[float | None, ...]
    set_rates: tuple[float, ...] = ()


@dataclass(frozen=True)
class StepSeries:
    """One speculative arm's steps in run order (cells one after another):
    what the TUI's plots draw for a saved run."""

    arm: str
    landed: tuple[int, ...]
    step_s: tuple[float, ...]
    cost_tokens: tuple[float | None, ...]  # each step against its own cell's baseline
    max_yield: int | None
    cells: tuple[tuple[str, int, int], ...] = ()  # (prompt, round, steps) in order
    pass_kinds: tuple[str | None, ...] = ()  # each step's pass kind where the loop told it (switch, second, steady)


@dataclass(frozen=True)
class PolicySeries:
    arm: str
    prompt: str
    names: tuple[str, ...]  # the best fixed n first (lab.analysis.policy.Replay.policies)
    speedups: tuple[float, ...]
    fixed_n: tuple[int, ...] = ()
    fixed_speedup: tuple[float, ...] = ()
    best: str | None = None


@dataclass(frozen=True)
class MemoryBar:
    arm: str
    peak_mem_bytes: int | None
    gpu_peak_mem_bytes: int | None = None
    gpu_mean_power_w: float | None = None


@dataclass
class Planned:
    """A figure of a run: its file stem, the one question it answers, the
    report section it sits beside, and its data or why it has none."""

    name: str
    title: str
    section: str
    data: Any = None
    missing: str | None = None
    notes: list[str] = field(default_factory=list)


# -- the data of each figure ----------------------------------------------------


def _probes(data: Mapping[str, Any]) -> list[Any]:
    from lab.base import probe as probes

    many = [v if isinstance(v, probes.Probe) else probes.Probe.from_json(v) for v in data.get("probes") or ()]
    if many:
        return many
    one = data.get("probe")
    if one is None:
        return []
    return [one if isinstance(one, probes.Probe) else probes.Probe.from_json(one)]


def probe_label(pr: Any) -> str:
    words = f"{pr.backend} / {pr.model}"
    if pr.prices_steps:
        words += f", whole steps by {pr.priced_by}"
    if not pr.trusted:
        # drawn as measured, never priced with: the Prediction section says why
        words += " (refused: no trustworthy probe)"
    return words


def verify_cost(data: Mapping[str, Any]) -> list[ProbeCurve]:
    """T(w) of every probe the run carries, as the report's Prediction
    section prints it (:meth:`lab.base.probe.Probe.t_ratio`)."""
    out = []
    for pr in _probes(data):
        ts = [(w, pr.t_ratio(w), pr.t_range(w)) for w in pr.widths]
        kept = [(w, t, r) for w, t, r in ts if t is not None]
        none = [(w, pr.kept_none_ratio(w)) for w in pr.widths if w > 1]
        none_ok = [(w, v) for w, v in none if v is not None]
        out.append(ProbeCurve(
            label=probe_label(pr),
            widths=tuple(w for w, _, _ in kept), t=tuple(float(t) for _, t, _ in kept),
            t_min=tuple(r[0] for _, _, r in kept), t_max=tuple(r[2] for _, _, r in kept),
            kept_none_widths=tuple(w for w, _ in none_ok), kept_none=tuple(v for _, v in none_ok),
        ))
    return out


def speedup(data: Mapping[str, Any]) -> list[SpeedupSeries]:
    """Every speculative arm x prompt: the report's predicted curve and
    held-out prediction where the run has a probe and steps, and always its
    measured speedup with each paired round's."""
    results = data["results"]
    preds: list[dict[str, Any]] = []
    pool = _probes(data)
    if pool and data.get("steps") is not None:
        preds = analysis.predicted_for_rows(results, data["steps"], pool)
    by = {(p["arm"], p["prompt"]): p for p in preds}
    out = []
    for s in analysis.summarize(results):
        if s["is_baseline"] or not s["rounds"]:
            continue
        rounds = tuple(x for _, _, x in stats.paired_ratios(results, s["arm"], s["prompt"]))
        p = by.get((s["arm"], s["prompt"]))
        if p is None:
            if s["speedup"] is None or s["n_max"] is None:
                continue
            out.append(SpeedupSeries(s["arm"], s["prompt"], s["n_max"], s["speedup"], rounds))
            continue
        curve = [c for c in p["curve"] if c["speedup"] is not None]
        out.append(SpeedupSeries(
            s["arm"], s["prompt"], p["n_max"], p["measured"], rounds, held_out=p.get("held_out"),
            curve_n_max=tuple(int(c["n_max"]) for c in curve),
            curve_speedup=tuple(float(c["speedup"]) for c in curve),
            curve_extrapolated=tuple(bool(c["extrapolated"]) for c in curve),
        ))
    return out


def acceptance(data: Mapping[str, Any]) -> list[PositionSeries]:
    """Per arm x prompt, the report's per-position table as series; set
    rates (conditional, as the profile set them) where acceptance was set."""
    steps = data.get("steps")
    if not steps:
        return []
    from lab.analysis.set_acceptance_check import checks

    set_rates = {c.arm: tuple(p.set_rate for p in c.positions) for c in checks(data["results"], steps)}
    return [
        PositionSeries(arm, prompt, tuple(p.reached), tuple(p.conditional), tuple(p.unconditional),
                       set_rates.get(arm, ()))
        for (arm, prompt), p in analysis.positions(steps).items() if p.reached
    ]


def landed_histogram(landed: Sequence[int], max_yield: int | None) -> list[tuple[int, int]]:
    """(tokens landed, steps that landed that many) from 1 to the most seen
    or the max yield: the TUI's histogram and the figure's."""
    counts: dict[int, int] = {}
    for n in landed:
        counts[n] = counts.get(n, 0) + 1
    top = max([*counts, max_yield or 0, 1])
    return [(n, counts.get(n, 0)) for n in range(1, top + 1)]


def step_costs(step_s: Sequence[float], base_tok_per_s: float | None) -> list[float | None]:
    """Each step's seconds in baseline tokens (:func:`lab.base.metrics.step_cost_tokens`)."""
    return [metrics.step_cost_tokens(s, base_tok_per_s) for s in step_s]


def steps_by_arm(results: Sequence[Mapping[str, Any]], steps: Sequence[Mapping[str, Any]]) -> list[StepSeries]:
    """Every speculative arm's steps, cell after cell in the order the run
    saved them, each step priced against its own cell's baseline (same
    prompt and round, as the row's step cost is)."""
    from lab.rows.build import pick_baseline

    cells: dict[tuple[str, str, int], list[Mapping[str, Any]]] = {}
    for s in steps:
        cells.setdefault((s["arm"], s["prompt"], int(s["round"])), []).append(s)
    rows = {(r["arm"], r["prompt"], int(r.get("round", 1))): r for r in results}
    acc: dict[str, dict[str, Any]] = {}
    for (arm, prompt, rnd), cell in cells.items():
        row = rows.get((arm, prompt, rnd)) or {}
        a = acc.setdefault(arm, {"landed": [], "step_s": [], "cost": [], "cells": [], "kinds": [],
                                 "max_yield": row.get("max_yield") or metrics.max_yield(row.get("n_max"))})
        base_arm = row.get("baseline_arm")
        base = pick_baseline(results, base_arm, prompt, rnd) if base_arm else None
        base_tps = base.get("tok_per_s") if base else None
        ordered = sorted(cell, key=lambda s: int(s.get("index", 0)))
        a["landed"] += [int(s["landed"]) for s in ordered]
        a["step_s"] += [float(s["step_s"]) for s in ordered]
        a["cost"] += step_costs([float(s["step_s"]) for s in ordered], base_tps)
        a["cells"].append((prompt, rnd, len(ordered)))
        a["kinds"] += [s.get("pass_kind") if isinstance(s.get("pass_kind"), str) else None for s in ordered]
    return [StepSeries(arm, tuple(a["landed"]), tuple(a["step_s"]), tuple(a["cost"]), a["max_yield"],
                       tuple(a["cells"]), tuple(a["kinds"]) if any(a["kinds"]) else ())
            for arm, a in acc.items() if a["landed"]]


def latency(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The report's Latency table (:func:`lab.analysis.run.latency_summary`)."""
    return analysis.latency_summary(data["results"])


def policy(data: Mapping[str, Any]) -> list[PolicySeries]:
    """The report's Draft policy table: each replayed policy's predicted
    speedup beside the best fixed n."""
    from lab.analysis import policy as replay

    steps = data.get("steps")
    pool = _probes(data)
    if not steps or not pool:
        return []
    out = []
    for r in replay.replays(data["results"], steps, pool):
        ranked = r.policies()
        if not ranked:
            continue
        fixed = sorted((n, t.speedup) for n, t in r.fixed.items() if t.speedup is not None)
        top = r.best()
        out.append(PolicySeries(r.arm, r.prompt, tuple(n for n, _ in ranked), tuple(float(s) for _, s in ranked),
                                tuple(n for n, _ in fixed), tuple(float(s) for _, s in fixed),
                                top[0] if top else None))
    return out


def memory(data: Mapping[str, Any]) -> list[MemoryBar]:
    """Peak memory per arm (the report's Detail column, the largest over its
    prompts) and, on a GPU, its peak device memory and median power."""
    import statistics

    out = []
    arms = list(dict.fromkeys(r["arm"] for r in data["results"]))
    summaries = analysis.summarize(data["results"])
    for arm in arms:
        peaks = [s["peak_mem_bytes"] for s in summaries if s["arm"] == arm and s["peak_mem_bytes"]]
        rows = [r for r in data["results"] if r["arm"] == arm]
        gpu = [int(r["gpu_peak_mem_bytes"]) for r in rows if r.get("gpu_peak_mem_bytes") is not None]
        watts = [float(r["gpu_mean_power_w"]) for r in rows
                 if r.get("status") == "ok" and r.get("gpu_mean_power_w") is not None]
        bar = MemoryBar(arm, max(peaks) if peaks else None, max(gpu) if gpu else None,
                        statistics.median(watts) if watts else None)
        if bar.peak_mem_bytes or bar.gpu_peak_mem_bytes or bar.gpu_mean_power_w:
            out.append(bar)
    return out


# -- which figures a run gets ------------------------------------------------------

# (file stem, question, id of the report section it sits beside (lab.render.sections), data function,
# what it needs when empty)
FIGURES: tuple[tuple[str, str, str, Callable[[Mapping[str, Any]], Any], str], ...] = (
    ("speedup", "Speedup by n_max: predicted, measured and held out", "prediction", speedup,
     "no speculative arm finished with a speedup against its baseline"),
    ("verify-cost", "Verify cost T(w) against w", "prediction", verify_cost,
     "the run has no verify-cost probe"),
    ("acceptance", "Acceptance per draft position", "acceptance", acceptance,
     "no speculative steps were saved"),
    ("steps", "Step cost and tokens landed, step by step", "why",
     lambda d: steps_by_arm(d["results"], d.get("steps") or ()), "no speculative steps were saved"),
    ("latency", "Time to first token and inter-token gaps", "latency", latency,
     "no token arrival times were recorded"),
    ("policy", "Draft policies replayed against the best fixed n", "draft-policy", policy,
     "no speculative arm has steps and a probe to replay them with"),
    ("memory", "Peak memory per arm", "detail", memory, "no memory was sampled"),
)


def plan(data: Mapping[str, Any]) -> list[Planned]:
    """Every figure of a run with its data, or the reason it has none (a
    figure whose data fails to build costs that figure, not the others)."""
    out = []
    for name, title, section, build, empty in FIGURES:
        try:
            series = build(data)
        except Exception as exc:  # noqa: BLE001 - a saved run is user data: one figure lost, not the report
            out.append(Planned(name, title, section, missing=f"its data could not be read ({type(exc).__name__}: "
                                                            f"{str(exc)[:120]})"))
            continue
        if not series:
            out.append(Planned(name, title, section, missing=empty))
        else:
            out.append(Planned(name, title, section, data=series))
    return out


def plan_compare(data_a: Mapping[str, Any], data_b: Mapping[str, Any], name_a: str, name_b: str) -> list[Planned]:
    """The two overlays of a comparison: speedup by n_max and T(w), each
    series carrying which run it came from."""
    out = []
    for name, title, build, empty in (
        ("compare-speedup", "Speedup by n_max, A against B", speedup, "neither run has a speculative speedup"),
        ("compare-verify-cost", "Verify cost T(w), A against B", verify_cost, "neither run has a probe"),
    ):
        try:
            series = [(name_a, s) for s in build(data_a)] + [(name_b, s) for s in build(data_b)]
        except Exception as exc:  # noqa: BLE001 - as in plan()
            out.append(Planned(name, title, "", missing=f"its data could not be read ({type(exc).__name__})"))
            continue
        out.append(Planned(name, title, "", data=series) if series else Planned(name, title, "", missing=empty))
    return out
