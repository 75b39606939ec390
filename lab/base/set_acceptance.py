"""Set acceptance: drafted tokens kept at chosen rates instead of by
agreement, so a drafter is priced at an acceptance the user picks while every
second of the step stays real. On every stack it means llama.cpp's
**unconditional rates per draft position** (``r[i]``: the chance a step
keeps at least i + 1 drafts, non-increasing), from a profile's
``acceptance = 0.7`` (one per-token chance), ``{ rates = [...] }`` or
``{ mean_length = 3.5 }`` (tokens landed per step, as ``--spec-synth-len``).
Such output is not the target's and is never held to greedy identity.
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
    """The seed of one cell's draws from the run's seed, prompt and round:
    cells that drew alike would count one sample many times when pooled."""
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
