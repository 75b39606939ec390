"""Report lines for arms whose acceptance was set (lab.analysis.set_acceptance_check)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from lab.analysis.set_acceptance_check import Z_LIMIT, checks
from lab.base.set_acceptance import from_json


def condition_lines(results: Sequence[Mapping[str, Any]], steps: Sequence[Mapping[str, Any]] | None) -> list[str]:
    """The Conditions block: which arms kept drafts at set rates, and whether
    the engine's counts agree with the rates (empty when no arm set any)."""
    found = checks(results, steps)
    if not found:
        return []
    lines = [
        "Set acceptance: these arms kept drafted tokens at set rates, not by agreement with the target. "
        "Their cost per step is measured; their acceptance is the profile's, and their output is not "
        "compared with the baseline's.",
        "",
    ]
    for c in found:
        setting = from_json(c.setting)
        what = setting.describe() if setting is not None else "rates per position"
        if steps is None:
            lines.append(f"- {c.arm}: {what} (the check needs steps.jsonl)")
            continue
        cells = []
        for p in c.positions:
            if p.measured is None:
                cells.append(f"pos {p.position} set {p.set_rate:.2f}, not reached")
            else:
                cells.append(f"pos {p.position} set {p.set_rate:.2f}, measured {p.measured:.2f} of {p.reached}")
        if c.honoured is None:
            verdict = "no steps measured"
        elif c.honoured:
            verdict = f"within binomial noise (worst {c.worst_z:.1f} standard errors)"
        elif c.below:
            verdict = (f"⚠ below the set rates ({c.worst_z:.1f} standard errors, limit {Z_LIMIT}): the engine "
                       "refused drafts the setting would keep (llama-server never keeps a drafted end-of-generation "
                       "token, which a random draft proposes often), or its counts are wrong")
        else:
            verdict = (f"⚠ NOT within binomial noise ({c.worst_z:.1f} standard errors, limit {Z_LIMIT}): "
                       "the engine did not keep drafts at the set rates, or its counts are wrong")
        lines.append(f"- {c.arm}: {what}; {'; '.join(cells)} — {verdict}")
    return lines


def verdict_mark(summary: Mapping[str, Any]) -> str:
    """What the summary table sets beside a set-acceptance arm's verdict."""
    return " (acceptance set)" if summary.get("set_acceptance") else ""
