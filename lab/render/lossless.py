"""The report's lossless section, from a run's lossless.json (:mod:`lab.analysis.lossless_loader` reads it)."""

from __future__ import annotations

from typing import Any, Mapping


def markdown_lines(check: Mapping[str, Any] | None) -> list[str]:
    if not check:
        return []
    lines = [
        "", "## Lossless at temperature > 0", "",
        f"{check.get('backend')} / {check.get('model')} at T={check.get('temperature')}: "
        f"{check.get('samples')} continuations of {check.get('tokens')} tokens per side and context "
        f"({', '.join(map(str, check.get('contexts') or []))}), n_max {check.get('n_max')}, "
        f"family-wise alpha {check.get('alpha')}; the smallest total-variation distance this sample detects "
        f"≈ {float(check.get('min_detectable_tv') or 0):.2f}.",
        "",
    ]
    for v in check["verdicts"]:
        # The summary opens with the verdict; a bare one gets it said.
        mark = {True: "lossless", False: "NOT lossless", None: "inconclusive"}.get(v.get("lossless"), "?")
        lines.append(f"- {v.get('drafter')}: {v.get('summary') or mark}")
    return lines
