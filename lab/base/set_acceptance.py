"""Set acceptance: a speculative arm whose drafted tokens are kept at chosen
rates instead of by agreement with the target.

It prices a drafter at an acceptance the user picks: the draft model runs
and the target verifies every drafted row as usual (so every second of the
step is real), but whether a drafted token is kept is a draw. The meaning is
one, on every stack, and is llama.cpp's: a list of **unconditional rates per
draft position**, ``r[i]`` = the chance that a step keeps at least ``i + 1``
drafted tokens when it drafted them, non-increasing. Each position is then
kept with the conditional chance ``r[i] / r[i - 1]`` given the ones before
it were. A profile says it one of three ways, all resolved to that list for
the arm's n_max:

- ``acceptance = 0.7``: every drafted token is kept with chance 0.7 given
  the one before it was (rates 0.7, 0.49, 0.343, ...);
- ``acceptance = { rates = [0.9, 0.8, 0.6] }``: the rates themselves (one
  per position up to n_max at least; positions past n_max are dropped);
- ``acceptance = { mean_length = 3.5 }``: tokens a step lands on average,
  the target's own token included (1 + the sum of the rates), made by one
  per-token chance as llama.cpp's ``--spec-synth-len`` does.

Output from such an arm is not the target's: it is never compared for
greedy identity, and every row and report says its acceptance was set.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

KINDS = ("rate", "rates", "mean_length")


class AcceptanceError(ValueError):
    """A set acceptance that cannot be honoured, with a message for users."""


@dataclass(frozen=True)
class SetAcceptance:
    """One way of setting acceptance, as the profile gave it."""

    kind: str  # one of KINDS
    value: float | tuple[float, ...]
    # Set when the profile gave one setting per prompt: the arm this setting
    # makes runs that prompt only (a server takes its rates at start).
    prompt: str | None = None

    def rates(self, n_max: int) -> tuple[float, ...]:
        """Unconditional rates for positions 1..n_max."""
        if n_max < 1:
            raise AcceptanceError("set acceptance needs an arm that drafts (n_max of at least 1)")
        if self.kind == "rate":
            p = float(self.value)  # type: ignore[arg-type]
            return tuple(p ** (i + 1) for i in range(n_max))
        if self.kind == "rates":
            rates = tuple(float(r) for r in self.value)  # type: ignore[union-attr]
            if len(rates) < n_max:
                raise AcceptanceError(
                    f"acceptance rates give {len(rates)} positions; n_max {n_max} drafts {n_max}: give one rate per position")
            return rates[:n_max]
        if self.kind == "mean_length":
            p = per_token_rate(float(self.value), n_max)  # type: ignore[arg-type]
            return tuple(p ** (i + 1) for i in range(n_max))
        raise AcceptanceError(f"unknown acceptance kind {self.kind!r}")

    def label(self) -> str:
        """Short, for arm names made by a sweep and for report lines."""
        for_prompt = self.prompt or ""
        if self.kind == "rate":
            return f"{for_prompt}{float(self.value):g}"  # type: ignore[arg-type]
        if self.kind == "mean_length":
            return f"{for_prompt}L{float(self.value):g}"  # type: ignore[arg-type]
        return for_prompt + "r" + "_".join(f"{r:g}" for r in self.value)  # type: ignore[union-attr]

    def describe(self) -> str:
        """What the setting means, in words, for reports."""
        if self.kind == "rate":
            return f"each drafted token kept with chance {float(self.value):g} given the one before it"  # type: ignore[arg-type]
        if self.kind == "mean_length":
            return f"a mean of {float(self.value):g} tokens landed per step"  # type: ignore[arg-type]
        return "rates per position " + ", ".join(f"{r:g}" for r in self.value)  # type: ignore[union-attr]

    def to_json(self) -> dict[str, Any]:
        value = list(self.value) if isinstance(self.value, tuple) else self.value
        out: dict[str, Any] = {"kind": self.kind, "value": value}
        if self.prompt is not None:
            out["prompt"] = self.prompt
        return out


def draw_seed(seed: int, prompt: str, round: int) -> int:
    """The seed of one cell's set-acceptance draws: the run's seed, the
    prompt and the round, so that no two cells draw the same sequence (with
    one seed for all, every cell of an arm would keep and refuse at the same
    steps, and pooling them would count one sample many times)."""
    key = f"{int(seed)}\x00{prompt}\x00{int(round)}".encode()
    return zlib.crc32(key) & 0x7FFFFFFF


def per_token_rate(mean_length: float, n_max: int) -> float:
    """The one per-token chance p with 1 + p + p^2 + ... + p^n_max equal to
    ``mean_length`` (the expected tokens a step lands drafting n_max)."""
    top = n_max + 1.0
    if not (math.isfinite(mean_length) and 1.0 <= mean_length <= top):
        raise AcceptanceError(f"a mean length of {mean_length:g} is not possible drafting {n_max}: it lies in [1, {top:g}]")
    if mean_length == top:
        return 1.0
    if mean_length == 1.0:
        return 0.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if 1.0 + sum(mid ** (i + 1) for i in range(n_max)) < mean_length:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def check_rates(rates: Sequence[float]) -> str | None:
    """Why a list of unconditional rates is not one, or None."""
    if not rates:
        return "give at least one rate"
    for i, r in enumerate(rates):
        if not (isinstance(r, (int, float)) and not isinstance(r, bool) and math.isfinite(r) and 0.0 <= r <= 1.0):
            return f"rate {i + 1} is not a number in [0, 1]"
        if i and r > rates[i - 1]:
            return (f"rate {i + 1} ({r:g}) exceeds rate {i} ({rates[i - 1]:g}): rates are unconditional, "
                    "the chance of keeping at least that many, so they never grow")
    return None


def conditional(rates: Sequence[float]) -> tuple[float, ...]:
    """Per-position chances given the positions before were kept."""
    out: list[float] = []
    prev = 1.0
    for r in rates:
        out.append(r / prev if prev > 0 else 0.0)
        prev = r
    return tuple(out)


def mean_length(rates: Sequence[float]) -> float:
    """Expected tokens a step lands: the target's own plus the kept drafts."""
    return 1.0 + sum(rates)


def from_json(data: Mapping[str, Any] | None) -> SetAcceptance | None:
    """A saved setting, or None (rows saved before acceptance could be set)."""
    if not isinstance(data, Mapping) or data.get("kind") not in KINDS:
        return None
    value = data.get("value")
    if isinstance(value, list):
        return SetAcceptance(str(data["kind"]), tuple(float(v) for v in value))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return SetAcceptance(str(data["kind"]), float(value))
    return None
