"""The report's section for a temperature > 0 lossless check saved with a
run (``lab lossless --run RUN_DIR`` writes ``lossless.json`` there): one
line per drafter with its verdict, beside the greedy equivalence of the
run's own rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

FILE = "lossless.json"


def load(run_dir: str | Path) -> dict[str, Any] | None:
    """The check saved in ``run_dir``, or None when there is none (or it
    cannot be read: the report then says nothing of it)."""
    path = Path(run_dir) / FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("verdicts"), list) else None


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
