"""The bounds a profile is held to before any engine sees it: numbers
reach native code and names become file names. [run] keys and n_max have
their ranges here, plugin options theirs from ``min`` / ``max``; every
bound prints (``describe``)."""

from __future__ import annotations

import builtins
import math
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Range:
    """Inclusive bounds; None leaves that side open."""

    low: float | None = None
    high: float | None = None

    def contains(self, value: float) -> bool:
        return (self.low is None or value >= self.low) and (self.high is None or value <= self.high)

    def describe(self) -> str:
        lo, hi = _num(self.low), _num(self.high)
        if lo is not None and hi is not None:
            return f"{lo}..{hi}"
        if lo is not None:
            return f">= {lo}"
        return f"<= {hi}" if hi is not None else "any"


def _num(value: float | None) -> str | None:
    if value is None:
        return None
    if float(value).is_integer():
        return f"{int(value):,}".replace(",", "_")
    return f"{value:g}"


RUN_RANGES: dict[str, Range] = {
    "max_tokens": Range(1, 1_048_576),
    "temperature": Range(0, 100),
    # llama.cpp takes a 32-bit unsigned seed
    "seed": Range(0, 2**32 - 1),
    "rounds": Range(1, 1000),
    "max_rounds": Range(1, 1000),
    "warmup": Range(0, 100),
    "warmup_tokens": Range(0, 1_048_576),
    "n_ctx": Range(64, 1_048_576),
    "probe_depth": Range(0, 1_048_576),
    "threads": Range(0, 512),
    # below 10 ms the sampler itself would take a core from the engine
    "memory_interval_s": Range(0.01, 3600),
}
# Seconds a plugin call may go without a sign of life (lab.base.profile.Deadlines):
# under a tenth of a second no engine answers; beyond a day no one waits.
DEADLINE_RANGE = Range(0.1, 86400)
# Tokens drafted per step; the write-ups went to 12, n-gram drafters to 64.
N_MAX = Range(1, 1024)
# An int option whose plugin declares no range still reaches C as a 32-bit int.
INT32 = Range(-(2**31), 2**31 - 1)

# A sweep multiplies arms: 100 x 100 values once started 10,001 of them.
MAX_ARMS = 256
# Question sets such as Spec-Bench hold about 500 prompts.
MAX_PROMPTS = 1000
# Arm and prompt names go into file names.
MAX_NAME = 100
MAX_DESCRIPTION = 2000


class Bounded(Protocol):
    """What the bounds read of a plugin's option (``lab.api.Option``, which
    sits above this module)."""

    @property
    def type(self) -> builtins.type: ...
    @property
    def min(self) -> float | None: ...
    @property
    def max(self) -> float | None: ...


def option_range(option: Bounded) -> Range | None:
    """The range a plugin declares on an Option (``min`` / ``max``), if any."""
    low, high = option.min, option.max
    if low is None and high is None:
        return None
    return Range(low, high)


def range_note(option: Bounded) -> str:
    """The bound a profile check holds an option to, for listings such as
    ``lab plugins``: `` [1..4_096]``, or empty when nothing beyond its type."""
    rng = option_range(option)
    if rng is None and option.type is int:
        rng = INT32
    return f" [{rng.describe()}]" if rng is not None else ""


def out_of_range(value: float, rng: Range | None) -> str | None:
    """Why ``value`` is refused, or None. Floats must be finite anyway: no
    engine option means anything by inf or NaN."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number{'' if rng is None else f' in {rng.describe()}'}, got {value!r}"
    if rng is None or rng.contains(value):
        return None
    if rng.low is not None and value < rng.low:
        side = f"at least {_num(rng.low)}"
    else:
        side = f"at most {_num(rng.high)}"
    return f"must be {side} (range {rng.describe()}), got {value!r}"



def describe_limits() -> dict[str, str]:
    """Every bound this module holds a profile to, printable."""
    out = {f"run.{k}": r.describe() for k, r in RUN_RANGES.items()}
    out["arms.n_max"] = N_MAX.describe()
    out["arms.deadlines.*"] = DEADLINE_RANGE.describe()
    out["arms (after sweeps)"] = f"at most {MAX_ARMS}"
    out["prompts"] = f"at most {MAX_PROMPTS}"
    out["arm and prompt names"] = f"letters, digits, '_', '.', '-'; at most {MAX_NAME} characters; no '..'"
    return out
