"""A request's figures next to the server's own, and the checks that the
lab's step counts are the server's: its streamed totals, its /metrics
counters, its per-position acceptance and its per-request log summary."""

from __future__ import annotations

import statistics
from typing import Any, Mapping, Sequence

from lab.base.events import Clock, StepEvent
from lab_llamacpp_server.logparse import ImplStats, RequestSummary
from lab_llamacpp_server.metrics import counter_delta, per_position, without_positions
from lab_llamacpp_server.stream import StepTracker

MEASURED = {
    "drafted, accepted": "measured: the server's per-step log lines, equal to its counters",
    "step_s": "measured: server log timestamps between consecutive steps; the server's per-token "
              "generation clock (predicted_ms) for a request's first step and steps after plain tokens "
              "(see step_clock)",
    "draft_s": "not per step: the server logs its draft time once the request is over, after the steps "
               "were emitted; draft_s_mean is derived: the request's draft time / its draft calls",
    "verify_s": "not per step; verify_s_mean is derived: each step's step_s - draft_s_mean, averaged",
    "tok_per_s": "measured: streamed tokens / the generation phase on the server's clock (predicted_ms of "
                 "the streamed request); tok_per_s_client_clock uses the lab's arrival clock instead",
}


def draft_time(stats: Mapping[str, ImplStats], last: dict[str, ImplStats]) -> tuple[float | None, int | None]:
    """The server's draft milliseconds and calls for one request: its
    cumulative counters' difference since ``last``, which moves on."""
    draft_ms = 0.0
    calls = 0
    have_duration = False
    for impl, st in stats.items():
        prev = last.get(impl)
        if st.draft_ms is not None:
            have_duration = True
            draft_ms += st.draft_ms - ((prev.draft_ms or 0.0) if prev else 0.0)
        calls += st.calls_draft - (prev.calls_draft if prev else 0)
        last[impl] = st
    return (draft_ms if have_duration else None), (calls if stats else None)


def step_split(steps: Sequence[StepEvent], draft_ms: float | None, draft_calls: int | None) -> dict[str, Any]:
    """The request's mean draft and verify seconds per step: draft total over
    calls, verify a step's seconds less that (never below 0)."""
    per_call = draft_ms / 1000.0 / draft_calls if draft_ms is not None and draft_calls else None
    verify = (
        statistics.fmean(max(s.step_s - per_call, 0.0) for s in steps)
        if per_call is not None and steps else None
    )
    return {
        "draft_s_mean": per_call,
        "verify_s_mean": verify,
        "split_clocks": {
            "draft": (Clock.SERVER_TOTAL_PER_CALL if per_call is not None else Clock.NONE).value,
            "verify": (Clock.STEP_MINUS_DRAFT if verify is not None else Clock.NONE).value,
        },
    }


# What each check compares, for the row's record; timings, /metrics and the
# log summary print one slot counter, so they are one check.
SOURCES = {
    "steps_vs_slot_counters": "the lab's steps (one per 'accepted N/M draft tokens' trace line) against the slot's "
                              "own counters (n_draft_tokens, n_draft_accepted, n_draft_verif_steps), which the "
                              "final chunk's timings, /metrics and the request's log summary all print: one "
                              "counter read three ways, so one check",
    "per_position_vs_metrics": "accepted tokens per draft position rebuilt from the steps against the slot's "
                               "per-position array (/metrics spec_decode_num_accepted_tokens_per_pos_total)",
    "tokens_vs_timings": "tokens the lab received against the server's generated-token count (timings.predicted_n)",
}


def cross_check(steps: Sequence[StepEvent], report: Mapping[str, Any], delta: Mapping[str, float],
                summary: RequestSummary | None, speculative: bool,
                n_tokens: int) -> tuple[dict[str, bool], dict[str, bool | None], list[str]]:
    """Each independent source the server offers against the steps the lab
    emitted: (checks, the surfaces of the slot counters and whether each
    agreed (None: not read), the sources that were missing)."""
    drafted = sum(s.drafted for s in steps)
    accepted = sum(s.accepted for s in steps)
    checks: dict[str, bool] = {}
    missing: list[str] = []
    surfaces: dict[str, bool | None] = {}
    if speculative:
        timings = report.get("server_timings") or {}
        surfaces["timings"] = (
            (drafted, accepted) == (timings.get("draft_n", 0), timings.get("draft_n_accepted", 0))
            if timings else None
        )
        surfaces["metrics"] = (
            drafted == int(delta.get("spec_decode_num_draft_tokens_total", -1))
            and accepted == int(delta.get("spec_decode_num_accepted_tokens_total", -1))
            and len(steps) == int(delta.get("spec_decode_num_drafts_total", -1))
        ) if delta else None
        # the server logs no summary for a request that drafted nothing
        surfaces["request_summary"] = (
            (drafted, accepted) == (summary.generated, summary.accepted) if summary is not None
            else (True if drafted == 0 and timings else None)
        )
        for name, agreed in surfaces.items():
            if agreed is None:
                missing.append(f"slot counters via {name}")
        read = [v for v in surfaces.values() if v is not None]
        if read:
            checks["steps_vs_slot_counters"] = all(read)
        metrics_pos = report.get("metrics_accepted_per_pos")
        if metrics_pos:
            # accepted tokens per draft position, rebuilt from the steps
            ours = [sum(1 for s in steps if s.accepted > i) for i in range(len(metrics_pos))]
            checks["per_position_vs_metrics"] = ours == metrics_pos
        elif delta:
            missing.append("per-position counters in /metrics")
    predicted_n = (report.get("server_timings") or {}).get("predicted_n")
    if predicted_n is None:
        missing.append("timings.predicted_n (the server's token count)")
    else:
        checks["tokens_vs_timings"] = n_tokens == int(predicted_n)
    return checks, surfaces, missing


def count_checks(steps: Sequence[StepEvent], report: Mapping[str, Any], delta: Mapping[str, float],
                 summary: RequestSummary | None, speculative: bool, n_tokens: int) -> dict[str, bool]:
    """The independent checks alone (see :func:`cross_check`)."""
    return cross_check(steps, report, delta, summary, speculative, n_tokens)[0]


def fill_report(report: dict[str, Any], *, n_tokens: int, gen_s: float, speculative: bool,
                steps: Sequence[StepEvent], tracker: StepTracker, logged_steps: int,
                metrics_before: Mapping[str, float], metrics_after: Mapping[str, float],
                acc_per_pos: list[float] | None, summary: RequestSummary | None,
                draft_ms: float | None, draft_calls: int | None) -> dict[str, bool]:
    """Add the server's own figures, the derived step split and the count
    checks to a generation's engine report; returns the checks."""
    timings = report.get("server_timings", {})
    report["predicted_per_second"] = timings.get("predicted_per_second")
    report["predicted_n"] = timings.get("predicted_n")
    report["prompt_ms"] = timings.get("prompt_ms")
    report["draft_n"] = timings.get("draft_n", 0 if speculative else None)
    report["draft_n_accepted"] = timings.get("draft_n_accepted", 0 if speculative else None)
    lab_tps = n_tokens / gen_s if gen_s > 0 else None
    server_tps = timings.get("predicted_per_second")
    report["tok_per_s_lab_over_server"] = lab_tps / server_tps if lab_tps and server_tps else None
    client_gen_s = report.get("client_gen_s") or 0.0
    client_tps = (n_tokens - 1) / client_gen_s if client_gen_s > 0 and n_tokens > 1 else None
    report["tok_per_s_client_clock"] = client_tps
    report["client_clock_over_server"] = client_tps / server_tps if client_tps and server_tps else None
    delta = counter_delta(dict(metrics_before), dict(metrics_after)) if metrics_before and metrics_after else {}
    report["metrics_delta"] = without_positions(delta)
    report["metrics_accepted_per_pos"] = per_position(delta)
    report["log_accepted_per_pos"] = acc_per_pos
    report["server_draft_ms"] = draft_ms
    report["server_draft_calls"] = draft_calls
    report.update(step_split(steps, draft_ms, draft_calls))
    report["log_steps"] = logged_steps
    report["stream_steps_n"] = len(tracker.steps)
    report["stream_steps"] = [(s.drafted, s.accepted, s.landed) for s in tracker.steps]
    report["plain_tokens_stream"] = tracker.plain_tokens
    clocks: dict[str, int] = {}
    for step in steps:
        clocks[step.clocks.step.value] = clocks.get(step.clocks.step.value, 0) + 1
    report["step_clock"] = clocks
    report["measured"] = dict(MEASURED)
    checks, surfaces, missing = cross_check(steps, report, delta, summary, speculative, n_tokens)
    report["checks"] = checks
    report["checks_sources"] = {k: SOURCES[k] for k in checks}
    report["slot_counter_surfaces"] = surfaces
    report["checks_missing"] = missing
    report["counts_match_server"] = all(checks.values()) if checks else None
    return checks
