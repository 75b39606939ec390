"""report.md's Draft policy section and its JSON: draft-length policies
replayed on the recorded steps (:mod:`lab.analysis.policy`) and, for arms
that ran a policy live, the replay beside the measurement."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from lab.analysis import policy
from lab.base.units import percent, speedup


def _error(value: float | None) -> str:
    return "" if value is None else f" ({percent(value, '+.0f')})"


def json_data(data: Mapping[str, Any], probes: Sequence[Any]) -> dict[str, Any] | None:
    """``analysis.draft_policy`` of the JSON export; None without steps or a probe."""
    try:
        return policy.policy_json(data["results"], data.get("steps"), probes)
    except (ArithmeticError, ValueError, TypeError):
        return None  # a probe the arithmetic cannot take costs this part alone


def markdown_lines(data: Mapping[str, Any], probes: Sequence[Any]) -> list[str]:
    """The section with its heading, or nothing when no speculative arm has
    steps and a probe to replay them with."""
    steps = data.get("steps")
    if steps is None or not probes:
        return []
    try:
        reps = policy.replays(data["results"], steps, probes)
        live = policy.live_checks(data["results"], steps, probes)
    except (ArithmeticError, ValueError, TypeError) as exc:
        return ["", "## Draft policy", "", f"No replay: the probe could not be used ({type(exc).__name__}: "
                                           f"{str(exc)[:200]})."]
    if not reps and not live:
        return []
    lines = ["", "## Draft policy", ""]
    if reps:
        lines += [
            "| arm | prompt | recorded n_max | steps (tokens) | fixed n: predicted | grow-shrink | grow-halve "
            "| per-category | best policy | over the best fixed n |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in reps:
            bf, top = r.best_fixed(), r.best()
            curve = ", ".join(f"{n}: {t.speedup:.2f}" + ("**" if bf and n == bf[0] else "")
                              for n, t in sorted(r.fixed.items()) if t.speedup is not None)
            adaptive = [speedup(r.adaptive[p].speedup) if p in r.adaptive else "—" for p in policy.ADAPTIVE]
            per_cat = "—"
            if r.per_category is not None:
                chosen = f" (n {r.per_category[0]})" if r.per_category[0] else ""
                per_cat = speedup(r.per_category[1].speedup) + chosen
            head = r.headroom()
            lines.append(
                f"| {r.arm} | {r.prompt} | {r.recorded_n_max} | {r.recorded.steps} ({r.recorded.tokens}) | {curve} | "
                f"{' | '.join(adaptive)} | {per_cat} | {top[0] if top else '—'} | "
                f"{'—' if head is None else f'{head:.2f}x'} |"
            )
    if live:
        lines += [
            "",
            "Policies run live, against the same policy replayed from the fixed arm of the same drafter and "
            "options with the largest n_max:",
            "",
            "| arm | prompt | policy | n_max | replayed from | predicted | best fixed n there | predicted gain "
            "| measured (prediction's error) | measured gain |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for c in live:
            fixed = f"{c.best_fixed_n}: {speedup(c.best_fixed)}" if c.best_fixed_n is not None else "—"
            measured_gain = (f"{speedup(c.measured_gain)} over the arm of n_max {c.best_fixed_n}"
                             if c.measured_gain is not None else "—")
            lines.append(
                f"| {c.arm} | {c.prompt} | {c.policy} | {c.n_max} | {c.source} | {speedup(c.predicted)} | {fixed} | "
                f"{speedup(c.predicted_gain)} | {speedup(c.measured)}{_error(c.error)} | {measured_gain} |"
            )
    lines += [
        "",
        "Predicted speedups over the baseline, each step priced as the Prediction prices it (T(w) from the probe, "
        "the arm's draft and loop seconds), from the steps the arm recorded, re-cut along the recorded text into "
        "each policy's own steps: a step drafts what it asks for (at most what the recorded draft offered from "
        "there), lands up to its first refused draft and the target's token, and the next starts after it; a "
        "step that would start where no recorded draft reached is a plain decode. It assumes a draft at a "
        "position is kept or refused whatever step it came in: exact on the recorded anchors (fixed at the "
        "recorded n_max is the in-sample prediction), an approximation off them. ** marks the best fixed n, "
        "the reference. No policy is replayed past the recorded n_max: the "
        "arm with the largest n_max of a sweep is the source. Per-category takes each category's best fixed n, "
        "chosen on the same steps (in-sample). The best policy must beat the best fixed n by more than 1 %; "
        "its figure over the best fixed n's is the headroom. Plain decodes (no draft offered) are taken as "
        "recorded.",
        "",
        f"Not replayed: {policy.CONFIDENCE_NOTE}.",
    ]
    return lines
