"""Building a result row (:class:`lab.base.row.ResultRow`) from one cell's
steps and generation, and finding a cell's baseline row.
Figures come from :mod:`lab.base.metrics`, as in the live view."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from lab.base import metrics
from lab.base.cells import Status
from lab.base.events import StepEvent
from lab.base.row import COLD_FIRST_ROUND, GPU_KEYS, ResultRow, RowT
from lab.base.verdict import verdict
from lab.rows import serving
from lab.rows.bounds import bounded_report
from lab.rows.output_check import degenerate_output
from lab.rows.plausible import impossible_figure

if TYPE_CHECKING:
    from lab.base.profile import Arm
    from lab.telemetry.contention import Contention


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


def _split_mean(per_step: Sequence[float], engine_report: Mapping[str, Any] | None, key: str) -> float | None:
    """Mean draft or verify seconds per step, from the steps, else from the
    engine's per-request figure (a server's live steps carry none)."""
    if per_step:
        return metrics.mean(per_step)
    value = (engine_report or {}).get(key)
    return float(value) if isinstance(value, (int, float)) else None


def build_result(
    *,
    arm: Arm,
    prompt: str,
    round: int,
    status: Status | str,
    steps: Sequence[StepEvent] = (),
    n_tokens: int | None = None,
    gen_s: float | None = None,
    prompt_tokens: int | None = None,
    prompt_s: float | None = None,
    text: str | None = None,
    baseline: Mapping[str, Any] | None = None,
    peak_mem_bytes: int | None = None,
    engine_bytes: int | None = None,
    process_bytes: int | None = None,
    detail: str = "",
    engine_report: Mapping[str, Any] | None = None,
    text_origin: Sequence[Sequence[int]] | None = None,
    gpu_keys: Mapping[str, Any] | None = None,
    category: str | None = None,
    latency: Mapping[str, float | None] | None = None,
    contention: Contention | None = None,
    warm: bool = False,
    max_tokens: int | None = None,
    overshoot: int = 0,
    ignore_eos: bool = False,
    cold_first: Mapping[str, Any] | None = None,
) -> ResultRow:
    """Assemble one row against ``baseline`` (same prompt and round, or the
    nearest); a warm arm's later round is held to its own ``cold_first``
    round instead. An impossible figure
    (:func:`lab.rows.plausible.impossible_figure`) makes an error row."""
    status = Status(status)
    if status == Status.OK:
        wrong = impossible_figure(n_tokens=n_tokens, max_tokens=max_tokens, overshoot=overshoot,
                                  steps=steps, gen_s=gen_s, prompt_s=prompt_s, ignore_eos=ignore_eos)
        if wrong is not None:
            status = Status.ERROR
            detail = f"impossible figure: {wrong}" + (f"; {detail}" if detail else "")
    ok = status == Status.OK
    speculative = not arm.is_baseline
    counted = speculative and ok
    tok_per_s = metrics.tok_per_s(n_tokens, gen_s) if ok else None
    landed = sum(s.landed for s in steps)
    n_steps = len(steps) if counted else None
    drafted = sum(s.drafted for s in steps) if counted else None
    accepted = sum(s.accepted for s in steps) if counted else None
    step_s = metrics.mean([s.step_s for s in steps])
    draft_vals = [s.draft_s for s in steps if s.draft_s is not None]
    verify_vals = [s.verify_s for s in steps if s.verify_s is not None]
    base_tps = baseline.get("tok_per_s") if baseline else None
    # output kept at set rates is not the target's: never held to its baseline's
    set_rates = arm.set_rates
    judged = ok and speculative and set_rates is None and text is not None
    reference, against = identity_reference(baseline, round, warm, cold_first)
    identical = None
    divergence = None
    if judged and reference is not None and text is not None:
        divergence = first_divergence(text, reference["text"])
        identical = divergence is None
    cause = divergence_cause(identical, _held_evidence(engine_report, against, baseline, cold_first))
    origin = None
    # only when the runs add up to the text (a stream that lost a partial
    # character at the end would shift every mark after it)
    if counted and text is not None and text_origin is not None and sum(n for n, _ in text_origin) == len(text):
        origin = tuple((int(n), int(d)) for n, d in text_origin)
    row = ResultRow(
        arm=arm.name,
        backend=arm.backend,
        drafter=arm.drafter,
        prompt=prompt,
        round=round,
        status=status,
        n_tokens=n_tokens if ok else None,
        tok_per_s=tok_per_s,
        baseline_arm=arm.baseline,
        speedup=metrics.speedup(tok_per_s, base_tps),
        steps=n_steps,
        drafted=drafted,
        accepted=accepted,
        acceptance_rate=metrics.acceptance_rate(accepted, drafted),
        mean_accepted_len=metrics.mean_accepted_len(landed, n_steps),
        step_s=step_s if ok else None,
        draft_s=_split_mean(draft_vals, engine_report, "draft_s_mean") if ok else None,
        verify_s=_split_mean(verify_vals, engine_report, "verify_s_mean") if ok else None,
        step_cost_tokens=metrics.step_cost_tokens(step_s, base_tps) if ok else None,
        max_yield=metrics.max_yield(arm.n_max) if speculative else None,
        peak_mem_bytes=peak_mem_bytes,
        identical_to_baseline=identical,
        first_divergence_char=divergence,
        is_baseline=arm.is_baseline,
        group=arm.group,
        stack=arm.stack,
        model=arm.model,
        n_max=arm.n_max,
        sweep=dict(arm.sweep),
        prompt_tokens=prompt_tokens,
        prompt_s=prompt_s,
        gen_s=gen_s if ok else None,
        engine_bytes=engine_bytes,
        process_bytes=process_bytes,
        detail=detail,
        measured=steps[0].measured if steps else None,
        text=text,
        text_origin=origin,
        engine_report=bounded_report(engine_report),
        plain_tokens=(n_tokens - landed) if counted and n_tokens is not None else None,
        **_gpu_fields(gpu_keys),
        category=category,
        divergence_cause=cause,
        identity_reference=against if identical is not None else None,
        itl_p50_s=_latency(latency, "itl_p50_s", ok),
        itl_p95_s=_latency(latency, "itl_p95_s", ok),
        itl_p99_s=_latency(latency, "itl_p99_s", ok),
        ttft_s=_ttft_without_rehearsal(latency, engine_report) if ok else None,
        **_prompt_keys(engine_report),
        set_acceptance=_set_acceptance(arm, set_rates),
        degenerate_output=degenerate_output(text) if ok else None,
        **_contention_keys(contention, baseline),
        warm=warm,
        draft_config=draft_config(arm) if speculative else None,
        draft_policy=arm.draft_policy if arm.drafter is not None else None,
    )
    if ok:
        row = dataclasses.replace(row, **serving.row_fields(engine_report, baseline))
    return dataclasses.replace(row, verdict=verdict(row))


def draft_config(arm: Arm) -> str:
    """What drafts, beyond the drafter's name: the arm's engine and drafter
    options (a draft model's path is one of them), canonical JSON."""
    return json.dumps({"options": dict(arm.options), "drafter_options": dict(arm.drafter_options)},
                      sort_keys=True, default=str, separators=(",", ":"))


def _set_acceptance(arm: Arm, rates: tuple[float, ...] | None) -> dict[str, Any]:
    if arm.acceptance is None or rates is None:
        return {}
    return {**arm.acceptance.to_json(), "rates": [round(r, 6) for r in rates]}


def _prompt_keys(engine_report: Mapping[str, Any] | None) -> dict[str, Any]:
    """The prompt's hash and template as the backend reported sending them."""
    report = engine_report or {}
    return {"prompt_sha256": report.get("prompt_sha256"), "prompt_template": report.get("prompt_template")}


def _contention_keys(reading: Contention | None, baseline: Mapping[str, Any] | None) -> dict[str, Any]:
    """Busy-machine keys: a row is contended when its own cell or its
    baseline's cell ran on a busy machine (either makes the speedup wrong)."""
    own = reading is not None and reading.contended
    base_busy = bool(baseline is not None and baseline.get("contended") and not baseline.get("baseline_arm"))
    notes = [reading.note()] if reading is not None else []
    if base_busy and baseline is not None:
        notes.append(f"its baseline's cell ran on a busy machine ({baseline.get('contention_note') or 'see its row'})")
    return {
        "contended": None if reading is None and not base_busy else bool(own or base_busy),
        "contention": round(reading.others_cores, 3) if reading is not None else None,
        "contention_note": "; ".join(notes),
        "threads_hint": reading.threads_hint() if reading is not None else None,
    }


def _latency(shape: Mapping[str, float | None] | None, key: str, ok: bool) -> float | None:
    return shape.get(key) if ok and shape else None


def _ttft_without_rehearsal(latency: Mapping[str, float | None] | None, engine_report: Mapping[str, Any] | None) -> float | None:
    """A rehearsing drafter's untimed passes (lab.kit.speculative.rehearse) run
    between the request and the first token: they are no part of its wait."""
    ttft = (latency or {}).get("ttft_s")
    rehearsal = float((engine_report or {}).get("rehearsal_s") or 0.0)
    return ttft if ttft is None else max(0.0, ttft - rehearsal)


def identity_reference(baseline: Mapping[str, Any] | None, round: int, warm: bool,
                       cold_first: Mapping[str, Any] | None) -> tuple[Mapping[str, Any] | None, str | None]:
    """The row a cell's greedy output is held to and what it is: the
    baseline's, except in round 2 on of warm rounds, where it is the arm's
    own cold first round (none when that round has no ok text)."""
    if warm and round > 1:
        ok = cold_first is not None and cold_first.get("status") == "ok" and cold_first.get("text") is not None
        return (cold_first, COLD_FIRST_ROUND) if ok else (None, None)
    if baseline is not None and baseline.get("text") is not None:
        return baseline, "baseline"
    return None, None


def _held_evidence(engine_report: Mapping[str, Any] | None, against: str | None,
                   baseline: Mapping[str, Any] | None, cold_first: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The engine's divergence check compares with the baseline's output:
    it explains a row held to its cold first round only when that round's
    text is the baseline's."""
    if against != COLD_FIRST_ROUND:
        return engine_report
    same = baseline is not None and cold_first is not None and baseline.get("text") == cold_first.get("text")
    if same:
        return engine_report
    return {k: v for k, v in (engine_report or {}).items() if k != "divergence"}


def divergence_cause(identical: bool | None, engine_report: Mapping[str, Any] | None) -> str | None:
    """What the row's divergence is put down to (see lab.api.DivergenceExplaining)."""
    if identical is not False:
        return None
    evidence = (engine_report or {}).get("divergence")
    cause = evidence.get("cause") if isinstance(evidence, Mapping) else None
    return str(cause) if cause else "not established"


def _gpu_fields(keys: Mapping[str, Any] | None) -> dict[str, Any]:
    """The row's GPU keys (lab.base.row.GPU_KEYS), None for each one not given."""
    return {k: (keys or {}).get(k) for k in GPU_KEYS}


def pick_baseline(rows: Iterable[RowT], arm: str, prompt: str, round: int) -> RowT | None:
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
