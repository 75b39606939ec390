"""The report's section for a temperature > 0 lossless check saved with a
run (``lab lossless --run RUN_DIR`` writes ``lossless.json`` there): one
line per drafter with its verdict, beside the greedy equivalence of the
run's own rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


