"""Result rows: one per arm x prompt x round, with every key of the contract
(DESIGN.md, "CLI contract"). Not applicable -> None."""

from __future__ import annotations

import statistics
from typing import Any, Iterable, Mapping, Sequence

from lab.events import StepEvent
from lab.verdict import verdict

RESULT_KEYS = (
    "arm", "backend", "drafter", "prompt", "round", "status",
    "n_tokens", "tok_per_s", "baseline_arm", "speedup",
    "steps", "drafted", "accepted", "acceptance_rate", "mean_accepted_len",
    "step_s", "draft_s", "verify_s", "step_cost_tokens", "max_yield",
    "peak_mem_bytes", "identical_to_baseline", "first_divergence_char", "verdict",
)
# Keys beyond the contract that reports and analysis use.
EXTRA_KEYS = (
    "is_baseline", "group", "stack", "model", "n_max", "sweep", "prompt_tokens", "prompt_s", "gen_s",
    "engine_bytes", "detail", "measured", "text", "text_origin", "engine_report", "plain_tokens",
)


def add_origin(runs: list[list[int]], chars: int, from_draft: bool) -> None:
    """Extend ``text_origin``: runs of [characters, 1 if they came from
    accepted drafts else 0] that cover the text in order, so a saved run can
    show which tokens the drafter landed."""
    if chars <= 0:
        return
    flag = int(from_draft)
    if runs and runs[-1][1] == flag:
        runs[-1][0] += chars
    else:
        runs.append([chars, flag])


def first_divergence(a: Sequence[object], b: Sequence[object]) -> int | None:
    """Index of the first differing item of two texts or token lists; None
    when equal, the shorter length when one is a prefix of the other."""
    if a == b:
        return None
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def _mean(xs: Sequence[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def build_result(
    *,
    arm: Any,
    prompt: str,
    round: int,
    status: str,
    steps: Sequence[StepEvent] = (),
    n_tokens: int | None = None,
    gen_s: float | None = None,
    prompt_tokens: int | None = None,
    prompt_s: float | None = None,
    text: str | None = None,
    baseline: Mapping[str, Any] | None = None,
    peak_mem_bytes: int | None = None,
    engine_bytes: int | None = None,
    detail: str = "",
    engine_report: Mapping[str, Any] | None = None,
    text_origin: Sequence[Sequence[int]] | None = None,
) -> dict[str, Any]:
    """Assemble one row. ``baseline`` is the baseline's row for the same
    prompt and round (or the nearest round), used for speedup, step cost and
    greedy equivalence."""
    ok = status == "ok"
    tok_per_s = n_tokens / gen_s if ok and n_tokens and gen_s else None
    speculative = not arm.is_baseline
    drafted = sum(s.drafted for s in steps) if speculative and ok else None
    accepted = sum(s.accepted for s in steps) if speculative and ok else None
    n_steps = len(steps) if speculative and ok else None
    landed = sum(s.landed for s in steps)
    step_s = _mean([s.step_s for s in steps]) if steps else None
    draft_vals = [s.draft_s for s in steps if s.draft_s is not None]
    verify_vals = [s.verify_s for s in steps if s.verify_s is not None]
    base_tps = baseline.get("tok_per_s") if baseline else None
    speedup = tok_per_s / base_tps if tok_per_s and base_tps else None
    step_cost = step_s * base_tps if step_s is not None and base_tps else None
    identical = None
    divergence = None
    if ok and speculative and baseline and baseline.get("text") is not None and text is not None:
        divergence = first_divergence(text, baseline["text"])
        identical = divergence is None
    row: dict[str, Any] = {
        "arm": arm.name,
        "backend": arm.backend,
        "drafter": arm.drafter,
        "prompt": prompt,
        "round": round,
        "status": status,
        "n_tokens": n_tokens if ok else None,
        "tok_per_s": tok_per_s,
        "baseline_arm": arm.baseline,
        "speedup": speedup,
        "steps": n_steps,
        "drafted": drafted,
        "accepted": accepted,
        "acceptance_rate": accepted / drafted if drafted and accepted is not None else None,
        "mean_accepted_len": landed / n_steps if n_steps else None,
        "step_s": step_s if ok else None,
        "draft_s": _mean(draft_vals) if ok and draft_vals else None,
        "verify_s": _mean(verify_vals) if ok and verify_vals else None,
        "step_cost_tokens": step_cost if ok else None,
        "max_yield": (arm.n_max + 1) if speculative and arm.n_max else None,
        "peak_mem_bytes": peak_mem_bytes,
        "identical_to_baseline": identical,
        "first_divergence_char": divergence,
        "verdict": "",
        # extras
        "is_baseline": arm.is_baseline,
        "group": arm.group,
        "stack": arm.stack,
        "model": arm.model,
        "n_max": arm.n_max,
        "sweep": dict(arm.sweep),
        "prompt_tokens": prompt_tokens,
        "prompt_s": prompt_s,
        "gen_s": gen_s if ok else None,
        "engine_bytes": engine_bytes,
        "detail": detail,
        "measured": steps[0].measured if steps else None,
        "text": text,
        # only when the runs add up to the text (a stream that lost a
        # partial character at the end would shift every mark after it)
        "text_origin": [list(r) for r in text_origin]
        if ok and speculative and text is not None and text_origin is not None
        and sum(n for n, _ in text_origin) == len(text) else None,
        "engine_report": dict(engine_report or {}),
        "plain_tokens": (n_tokens - landed) if ok and n_tokens is not None and speculative else None,
    }
    row["verdict"] = verdict(row)
    return row


def pick_baseline(rows: Iterable[Mapping[str, Any]], arm: str, prompt: str, round: int) -> Mapping[str, Any] | None:
    """The baseline row for a cell: same prompt and round when it succeeded,
    else the median-speed ok round of that prompt."""
    same = [r for r in rows if r["arm"] == arm and r["prompt"] == prompt and r["status"] == "ok"]
    for r in same:
        if r["round"] == round:
            return r
    if not same:
        return None
    same.sort(key=lambda r: r["tok_per_s"] or 0)
    return same[len(same) // 2]
