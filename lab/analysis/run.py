"""Everything the analysis says about one saved run, as plain data: one
summary per arm x prompt over its rounds, with economics, statistics,
acceptance, predictions, divergences and the roofline."""

from __future__ import annotations

import statistics
from typing import Any, Iterable, Mapping, Sequence

from lab.analysis import caveats, drift, equivalence, holdout, predict, stats, verify_gap
from lab.analysis import measured_acceptance as acc
from lab.analysis.predict import probe_for
from lab.analysis.roofline import Roofline
from lab.base import economics as breakeven
from lab.base.probe import Probe
from lab.base.row import COLD_FIRST_ROUND, LATENCY_KEYS
from lab.base.verdict import failed_checks, judge, zero_acceptance
from lab.telemetry.latency import percentile


def _median(values: Iterable[Any]) -> float | None:
    xs = [v for v in values if v is not None]
    return statistics.median(xs) if xs else None


def _groups(results: Sequence[Mapping[str, Any]]) -> list[tuple[tuple[str, str], list[Mapping[str, Any]]]]:
    order: list[tuple[str, str]] = []
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in results:
        if int(r.get("round", 1)) < 1:  # warmup is never part of a result
            continue
        key = (r["arm"], r["prompt"])
        if key not in groups:
            order.append(key)
            groups[key] = []
        groups[key].append(r)
    return [(k, groups[k]) for k in order]


def ran_paired(data: Mapping[str, Any]) -> bool:
    """Whether a saved run's cells ran paired, each beside its baseline's
    (``results.json`` ``order``, else the profile's ``[run] order``); a run
    saved before the order existed ran arm by arm."""
    order = data.get("order")
    if isinstance(order, Mapping) and order.get("order"):
        return order["order"] == "paired"
    run = (data.get("profile") or {}).get("run") or {}
    if isinstance(run, Mapping) and run.get("order"):
        return run["order"] == "paired"
    return False


def summarize(results: Sequence[Mapping[str, Any]], paired: bool = True) -> list[dict[str, Any]]:
    """One row per arm x prompt over its rounds: medians of the ok rounds,
    min-max of tok/s, the paired speedups with their median (the cell's one
    figure), an interval where the pairs are enough for one, the call, and
    a verdict (:func:`lab.base.verdict.judge`). ``paired``: the cells ran
    beside their baselines' (:func:`ran_paired`)."""
    out = []
    for (arm, prompt), rows in _groups(results):
        ok = [r for r in rows if r["status"] == "ok"]
        statuses = sorted({r["status"] for r in rows})
        first = rows[0]
        tps = stats.spread(r["tok_per_s"] for r in ok)
        pairs = stats.paired_ratios(results, arm, prompt)
        ratios = [x for _, _, x in pairs]
        figure = stats.paired_speedup(ratios) if not first.get("is_baseline") else None
        identical = [r["identical_to_baseline"] for r in ok if r["identical_to_baseline"] is not None]
        divergences = [r["first_divergence_char"] for r in ok if r["first_divergence_char"] is not None]
        # what the rounds' outputs were held to: the baseline, and for later warm rounds their cold first round
        held_to = sorted({str(r["identity_reference"]) for r in ok if r.get("identity_reference")})
        # warm rounds share engine state: a trend, so no interval as if they were repeats
        warm = any(bool(r.get("warm")) for r in ok)
        by_round = {int(r["round"]): r for r in ok}
        costs = [by_round[rnd].get("step_cost_tokens") for _, rnd, _ in pairs if rnd in by_round]
        s: dict[str, Any] = {
            "arm": arm, "prompt": prompt, "backend": first["backend"], "drafter": first["drafter"],
            "status": "ok" if statuses == ["ok"] else "/".join(statuses),
            "rounds": len(ok),
            "is_baseline": bool(first.get("is_baseline")),
            "baseline_arm": first.get("baseline_arm"),
            "n_max": first.get("n_max"),
            "tok_per_s": tps.median if tps else None,
            "tok_per_s_min": tps.min if tps else None,
            "tok_per_s_max": tps.max if tps else None,
            "tok_per_s_spread": tps.relative if tps else None,
            "spread_too_wide": bool(tps and tps.too_wide),
            # the cell's one figure: the median of its paired speedups (a row
            # whose baseline round failed is priced against another round: used
            # only when no round pairs)
            "speedup": figure.median if figure else _median(r["speedup"] for r in ok),
            "speedups": list(figure.values) if figure else [],
            "speedup_ci": [figure.interval.low, figure.interval.high]
            if figure and figure.interval and not warm else None,
            "warm": warm,
            "round_tok_per_s": list(drift.series(rows, "tok_per_s")),
            "round_drafted": list(drift.series(rows, "drafted")),
            "round_accepted": list(drift.series(rows, "accepted")),
            "call": figure.call if figure else (stats.NO_PAIRS if not first.get("is_baseline") else None),
            "steps": _median(r["steps"] for r in ok),
            "drafted": _median(r["drafted"] for r in ok),
            "acceptance_rate": _median(r["acceptance_rate"] for r in ok),
            "mean_accepted_len": _median(r["mean_accepted_len"] for r in ok),
            # every round landed only the target's own token a step (lab.base.verdict.zero_acceptance)
            "zero_acceptance": bool(ok) and not first.get("is_baseline") and all(zero_acceptance(r) for r in ok),
            "step_s": _median(r["step_s"] for r in ok),
            "draft_s": _median(r["draft_s"] for r in ok),
            "verify_s": _median(r["verify_s"] for r in ok),
            "step_cost_tokens": _median(r["step_cost_tokens"] for r in ok),
            "max_yield": first.get("max_yield"),
            "peak_mem_bytes": max((r["peak_mem_bytes"] or 0 for r in rows), default=0) or None,
            "identical_to_baseline": all(identical) if identical else None,
            "first_divergence_char": min(divergences) if divergences else None,
            "identity_reference": held_to,
            # busy-machine rounds (lab.telemetry.contention); all of them, arm by arm, makes the verdict uncertain
            "contended_rounds": sum(1 for r in ok if r.get("contended")),
            "contended": bool(ok) and all(r.get("contended") for r in ok),
            "threads_hint": min((r["threads_hint"] for r in ok if r.get("threads_hint")), default=None),
            # rounds of one arm share its setting (lab.base.set_acceptance)
            "set_acceptance": dict(first.get("set_acceptance") or {}),
            # the first round whose output loops or writes markers (lab.rows.output_check)
            "degenerate_output": next((r.get("degenerate_output") for r in ok if r.get("degenerate_output")), None),
            # rounds whose steps the server's own counters contradict (engine_report.checks)
            "counts_failed_rounds": sum(1 for r in ok if failed_checks(r)),
        }
        econ = breakeven.economics(s)
        s["break_even_len"] = econ.break_even_len if econ else None
        s["needed_acceptance"] = econ.needed_acceptance if econ else None
        if ok:
            v = judge({**s, "status": "ok"}, ratios or None, costs if ratios else None, paired=paired,
                      rounds_needed=stats.rounds_to_settle(ratios))
        else:
            v = judge(first)
        s["verdict_kind"] = v.kind
        s["verdict"] = v.line
        # what the verdict rests on (acceptance, cost, speedup), whether it holds at any load, what would settle it
        s["verdict_evidence"] = v.evidence
        s["verdict_any_load"] = v.any_load
        s["verdict_settle"] = v.settle
        out.append(s)
    return out


def divergences(results: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every speculative round whose output left the one it was held to (its
    baseline's, or a warm arm's cold first round: ``against``)."""
    from lab.rows.build import pick_baseline

    out = []
    for r in results:
        if r.get("status") != "ok" or r.get("is_baseline") or r.get("identical_to_baseline") is not False:
            continue
        against = r.get("identity_reference") or "baseline"
        if against == COLD_FIRST_ROUND:
            ref = next((x for x in results if x["arm"] == r["arm"] and x["prompt"] == r["prompt"]
                        and x["round"] == 1 and x.get("status") == "ok"), None)
        else:
            base_arm = r.get("baseline_arm")
            ref = pick_baseline(results, base_arm, r["prompt"], r["round"]) if base_arm else None
        if ref is None or ref.get("text") is None or r.get("text") is None:
            continue
        d = equivalence.divergence(ref["text"], r["text"], ref.get("ids"), r.get("ids"))
        if d is None:
            continue
        out.append({
            "arm": r["arm"], "prompt": r["prompt"], "round": r["round"], "char": d.char, "token": d.token,
            "before": d.before, "baseline": d.baseline, "output": d.output, "against": against,
            "line": d.line(against),
        })
    return out


def positions(steps: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], acc.PositionAcceptance]:
    return acc.by_arm_prompt(steps)


def predictions(
    results: Sequence[Mapping[str, Any]], steps: Sequence[Mapping[str, Any]], probe: Any,
) -> list[dict[str, Any]]:
    """Per speculative arm x prompt: the predicted speedup at every n_max the
    probe covers, at the arm's own n_max beside the measured, and the best;
    nothing from a probe that is not trustworthy (the report says why)."""
    if probe is None or not probe.trusted:
        return []
    pos = acc.by_arm_prompt(steps)
    out = []
    for (arm, prompt), rows in _groups(results):
        if rows[0].get("is_baseline"):
            continue
        inputs = predict.arm_inputs(rows, steps)
        pa = pos.get((arm, prompt))
        if inputs is None or pa is None or not pa.reached:
            continue
        preds = predict.predict(pa, probe, inputs)
        if not preds:
            continue
        own = next((p for p in preds if p.n_max == inputs.n_max), None)
        top = predict.best(preds)
        measured = stats.paired_ratios(results, arm, prompt)
        held = holdout.held_out(results, steps, arm, prompt, probe, inputs.n_max)
        matches = probe.prices_arm(arm, rows[0].get("backend"), rows[0].get("model"))
        gaps = verify_gap.for_row(results, steps, arm, prompt, probe)
        own_gap = verify_gap.own_width(gaps, inputs.n_max)
        redone = predict.with_verify_cost(own, inputs, own_gap.run.mid) if own and own_gap else None
        notes = [[c.tag, c.why] for c in caveats.for_row(results, steps, arm, prompt, probe, matches)]
        if own_gap is not None and own_gap.beyond and redone is not None:
            notes.append([GAP_TAG, _gap_words(own_gap, redone, stats.paired_ratios(results, arm, prompt))])
        noisy = predict.probe_noise(probe, int(inputs.n_max or 1) + 1)
        if noisy:
            notes.append([NOISE_TAG, noisy])
        out.append({
            "arm": arm, "prompt": prompt, "n_max": inputs.n_max,
            "probe_matches": matches,
            # why the prediction may miss (lab.analysis.caveats): [tag, sentence] each
            "caveats": notes,
            # the probe against the row's own verifies, per width it ran (lab.analysis.verify_gap)
            "verify_gaps": [g.to_json() for g in gaps],
            # the prediction at the row's own n_max priced with its own verify cost instead of the probe's
            "predicted_with_run_verify": redone,
            "priced_depth": own.depth if own else None,
            # what measured the step cost: the engine itself for a probe that prices whole steps
            "priced_by": probe.priced_by,
            "step_priced": probe.prices_steps,
            "measured": statistics.median(x for _, _, x in measured) if measured else None,
            "predicted": own.speedup if own else None,
            "best_n_max": top.n_max if top else None,
            "best_predicted": top.speedup if top else None,
            # the best n_max lies past the positions measured: a guess carried on, not a finding
            "best_extrapolated": bool(top.extrapolated) if top else False,
            # made before the row ran: nothing from the row itself (lab.analysis.holdout)
            "held_out": held.predicted if held else None,
            "held_out_acceptance_from": held.acceptance_from if held else None,
            "held_out_costs_from": list(held.costs_from) if held else None,
            # a recurrent target's re-runs, baseline tokens a step: the other arms', this arm's expected
            "held_out_replays": list(held.replays) if held and held.replays else None,
            "measured_positions": len(pa.reached),
            "curve": [
                {"n_max": p.n_max, "speedup": p.speedup, "landed": p.landed, "verify_cost": p.verify_cost,
                 "draft_cost": p.draft_cost, "loop_cost": p.loop_cost, "extrapolated": p.extrapolated,
                 "kept_share": p.kept_share, "switch_cost": p.switch_cost, "catch_up_cost": p.catch_up_cost,
                 "cell_start": p.cell_start, "baseline_cell_start": p.baseline_cell_start}
                for p in preds
            ],
        })
    return out


GAP_TAG = "probe gap"
NOISE_TAG = "probe noise"


def _gap_words(gap: verify_gap.WidthGap, redone: float, measured: Sequence[Any]) -> str:
    """The probe's verify against the row's own at its width, and the
    prediction priced with the row's: where that one holds, the gap is the miss's cause."""
    mid = statistics.median(x for _, _, x in measured) if measured else None
    error = f" ({(redone / mid - 1) * 100:+.0f}% of the measured)" if mid else ""
    return (f"the probe priced a verify of {gap.width} rows at {gap.probe:.2f} baseline tokens, its own verifies cost "
            f"{gap.run.mid:.2f} ({gap.gap * 100:+.0f}%, beyond the ±{gap.noise * 100:.0f}% noise of both); at its "
            f"own verify cost the prediction would be {redone:.2f}x{error}: where the prediction misses, the probe "
            "is the likely cause")


def roofline(
    results: Sequence[Mapping[str, Any]], probe: Any, bandwidth_bytes_s: float | None = None,
    model_bytes: int | None = None,
) -> list[tuple[str, Roofline]]:
    """(baseline arm, roofline) for every baseline arm on the probed model,
    when a bandwidth and the model's bytes are known."""
    bw, source = bandwidth_bytes_s, "given"
    # A probe of a model on a GPU carries no bandwidth of that GPU (older
    # probes carry the host's, which does not bound it).
    if bw is None and probe is not None and probe.bandwidth_bytes_s and not probe.on_gpu:
        bw, source = probe.bandwidth_bytes_s, "read bandwidth measured by lab probe"
    size = model_bytes or (probe.model_bytes if probe is not None else None)
    if not bw:
        return []
    by_arm: dict[str, list[Mapping[str, Any]]] = {}
    for r in results:
        if r.get("is_baseline") and int(r.get("round", 1)) >= 1:
            by_arm.setdefault(r["arm"], []).append(r)
    out = []
    for arm, rows in by_arm.items():
        arm_size = size
        if model_bytes is None and (probe is None or rows[0].get("model") not in (None, probe.model)):
            # No probe of this model: the file on disk, when the run's model
            # reference still resolves here.
            from lab.kit.models import model_file_bytes

            arm_size = model_file_bytes(rows[0]["model"]) if rows[0].get("model") else None
        if not arm_size:
            continue
        tps = _median(r["tok_per_s"] for r in rows if r["status"] == "ok")
        out.append((arm, Roofline(int(arm_size), float(bw), source, tps)))
    return out


def predicted_for_rows(
    results: Sequence[Mapping[str, Any]], steps: Sequence[Mapping[str, Any]], probes: Sequence[Probe] | Probe | None,
) -> list[dict[str, Any]]:
    """Predicted beside measured speedup for every speculative arm x prompt,
    each priced by its own stack's probe: ``measured``, ``predicted``,
    ``best_n_max``, ``best_predicted`` and the ``curve``."""
    if probes is None:
        return []
    pool = [probes] if isinstance(probes, Probe) else [p for p in probes if p is not None]
    if not pool:
        return []
    owner: dict[str, int] = {}
    for r in results:
        if r.get("is_baseline") or r["arm"] in owner:
            continue
        p, _ = probe_for(r, pool)
        owner[r["arm"]] = pool.index(p) if p is not None else 0
    by_probe = [
        [pred for pred in predictions(results, steps, p) if owner.get(pred["arm"]) == i]
        if i in owner.values() else []
        for i, p in enumerate(pool)
    ]
    keyed = {(pred["arm"], pred["prompt"]): pred for preds in by_probe for pred in preds}
    order: list[tuple[str, str]] = []
    for r in results:
        key = (r["arm"], r["prompt"])
        if key in keyed and key not in order:
            order.append(key)
    return [keyed[k] for k in order]


def latency_summary(results: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per arm x prompt: the median over ok rounds of each latency
    figure (warmup excluded); pairs with no latency figure are left out."""
    out = []
    for (arm, prompt), group in _groups(results):
        rows = [r for r in group if r.get("status") == "ok"]
        if not rows:
            continue
        s: dict[str, Any] = {"arm": arm, "prompt": prompt, "rounds": len(rows)}
        for k in LATENCY_KEYS:
            xs = sorted(float(v) for v in (r.get(k) for r in rows) if v is not None)
            s[k] = percentile(xs, 50) if xs else None
        if any(s[k] is not None for k in LATENCY_KEYS):
            out.append(s)
    return out
