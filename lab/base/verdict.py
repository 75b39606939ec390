"""The one-line verdict of a result row: pays, break-even, loses, structural
loss (cost C at or above the most a step can land, n_max + 1), failed,
baseline, or uncertain for a row whose cell or baseline ran on a busy
machine (a summary only when every ok round was busy). The arithmetic is
:mod:`lab.base.economics`."""

from __future__ import annotations

from typing import Any, Mapping

from lab.base.economics import NEUTRAL_BAND, classify

__all__ = ["BUSY_WARNING", "COUNTS_WARNING", "THREADS_WARNING", "NEUTRAL_BAND", "busy_warning", "counts_warning", "failed_checks",
           "verdict", "verdict_kind"]

BUSY_WARNING = "⚠ busy machine"
COUNTS_WARNING = "⚠ counts differ from the server's"
THREADS_WARNING = "⚠ more threads than free cores"


def verdict(row: Mapping[str, Any]) -> str:
    return classify(row).line


def verdict_kind(row: Mapping[str, Any]) -> str:
    """The verdict's kind alone (pays, break-even, loses, structural loss,
    failed, baseline, no steps, no baseline), for colouring and diffs."""
    return classify(row).kind


def busy_warning(row: Mapping[str, Any]) -> str:
    """The mark beside a verdict taken on a busy machine ("" if none), with
    the thread count that fits (``threads_hint``) where threads were too many."""
    busy = row.get("contended_rounds")
    rounds = row.get("rounds")
    hint = row.get("threads_hint")
    try_it = f" (try threads = {hint})" if isinstance(hint, int) and not isinstance(hint, bool) else ""
    if busy is None:
        busy = 1 if row.get("contended") else 0
        rounds = None
    if not busy:
        return f"{THREADS_WARNING}{try_it}" if try_it else ""
    if rounds and busy < rounds:
        return f"{BUSY_WARNING} ({busy} of {rounds} rounds){try_it}"
    return BUSY_WARNING + try_it


def failed_checks(row: Mapping[str, Any]) -> list[str]:
    """The engine's count cross-checks (``engine_report.checks``: the lab's
    steps against the server's own counters) that this row failed."""
    checks = (row.get("engine_report") or {}).get("checks") or {}
    return [name for name, ok in checks.items() if ok is False]


def counts_warning(row: Mapping[str, Any]) -> str:
    """The mark a report sets beside a verdict whose counts the server
    contradicts ("" if none): the failed checks of a row, or how many rounds
    of a summary (``counts_failed_rounds``) failed one."""
    failed = row.get("counts_failed_rounds")
    if failed is None:
        names = failed_checks(row)
        return f"{COUNTS_WARNING} ({', '.join(names)})" if names else ""
    if not failed:
        return ""
    rounds = row.get("rounds")
    return f"{COUNTS_WARNING} ({failed} of {rounds} rounds)" if rounds else COUNTS_WARNING
