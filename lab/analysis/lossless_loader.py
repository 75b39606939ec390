"""The report's section for a temperature > 0 lossless check saved with a
run (``lab lossless --run RUN_DIR`` writes ``lossless.json`` there): one
line per drafter with its verdict, beside the greedy equivalence of the
run's own rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lab.base.rundir import LOSSLESS_FILE, read_json, run_file

FILE = LOSSLESS_FILE
# A check's verdicts are kilobytes; a device or a huge file is not read.
MAX_BYTES = 64 * 1024 * 1024


def load(run_dir: str | Path) -> dict[str, Any] | None:
    """The check saved in ``run_dir``, or None when there is none (or it
    cannot be read, is no regular file or is over MAX_BYTES: the report then
    says nothing of it)."""
    try:
        data, _ = read_json(run_file(run_dir, FILE), MAX_BYTES, "lossless check")
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("verdicts"), list) else None


