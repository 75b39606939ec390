"""What the overhead benchmarks share: the repository root their side
processes run from, min / median / max lines, and the one JSON line a side
process ends its output with."""

from __future__ import annotations

import json
import os
import statistics
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

# Side processes run from here so that ``python -m benchmarks.NAME`` resolves
# whatever directory the benchmark was started from.
ROOT = Path(__file__).resolve().parents[1]


def spread(xs: Sequence[float], fmt: str = ".3f", sep: str = "  ", count: bool = False) -> str:
    """``min X<sep>median Y<sep>max Z``, with ``(n=N)`` when ``count``."""
    line = sep.join(f"{name} {v:{fmt}}" for name, v in
                    (("min", min(xs)), ("median", statistics.median(xs)), ("max", max(xs))))
    return f"{line}  (n={len(xs)})" if count else line


def last_json_line(stdout: str) -> Any:
    """The JSON value a side process printed last (its result; anything it
    printed before is progress)."""
    return json.loads(stdout.strip().splitlines()[-1])


@contextmanager
def arms_in_this_process() -> Iterator[None]:
    """Runs in this block keep their arms in this process
    (``LAB_ARM_PROCESS=shared``): what a benchmark patches or clocks here is
    what the arm runs."""
    before = os.environ.get("LAB_ARM_PROCESS")
    os.environ["LAB_ARM_PROCESS"] = "shared"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("LAB_ARM_PROCESS", None)
        else:
            os.environ["LAB_ARM_PROCESS"] = before
