"""Acceptance per draft position, from the steps a run saved: a step that
drafted d and kept a reached positions 1..min(a+1, d), so position i's
conditional acceptance is accepted-at-i over reached-i; the unconditional
figure is shown beside it, never alone."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence


@dataclass(frozen=True)
class PositionAcceptance:
    """Counts per draft position (index 0 is position 1)."""

    reached: tuple[int, ...]
    accepted: tuple[int, ...]

    @property
    def rates(self) -> tuple[float | None, ...]:
        """Conditional acceptance: P(accept position i | positions < i accepted)."""
        return tuple(a / r if r else None for a, r in zip(self.accepted, self.reached))

    @property
    def conditional(self) -> tuple[float | None, ...]:
        """The same as :attr:`rates`, by the name reports use beside
        :attr:`unconditional`."""
        return self.rates

    @property
    def drafting_steps(self) -> int:
        """Steps that drafted at least one token (every one reaches position 1)."""
        return self.reached[0] if self.reached else 0

    @property
    def unconditional(self) -> tuple[float | None, ...]:
        """P(a step keeps at least i drafts) over every step that drafted:
        llama.cpp's and vLLM's per-position acceptance. A step that drafted
        fewer than i tokens counts as not keeping position i, as theirs do."""
        n = self.drafting_steps
        return tuple(a / n if n else None for a in self.accepted)

    def kept_all(self, n: int) -> float:
        """The chance a step drafting n keeps all n, from the conditional
        rates, carried over past the measured positions as
        :meth:`expected_landed` carries them."""
        rates = self.rates
        last: float = 0.0
        survive = 1.0
        for i in range(n):
            rate = rates[i] if i < len(rates) else None
            last = last if rate is None else rate
            survive *= last
        return survive

    def kept_exactly(self, n: int) -> tuple[float, ...]:
        """The chance a step drafting n keeps exactly k, for k = 0 to n."""
        rates = self.rates
        last: float = 0.0
        survive = 1.0
        out: list[float] = []
        for i in range(n):
            rate = rates[i] if i < len(rates) else None
            last = last if rate is None else rate
            out.append(survive * (1.0 - last))
            survive *= last
        return (*out, survive)

    def expected_landed(self, n: int) -> tuple[float, int]:
        """Expected tokens one step lands drafting n, and how many of those
        positions had no data (their rate is carried over from the last
        measured one, or taken as 0 when nothing was measured)."""
        rates = self.rates
        last: float = 0.0
        survive = 1.0
        total = 1.0
        missing = 0
        for i in range(n):
            rate = rates[i] if i < len(rates) else None
            if rate is None:
                missing += 1
                rate = last
            last = rate
            survive *= rate
            total += survive
        return total, missing


def per_position(steps: Iterable[Mapping[str, Any]]) -> PositionAcceptance:
    reached: list[int] = []
    accepted: list[int] = []
    for s in steps:
        d = int(s["drafted"])
        a = int(s["accepted"])
        tried = min(a + 1, d)
        while len(reached) < tried:
            reached.append(0)
            accepted.append(0)
        for i in range(tried):
            reached[i] += 1
            if i < a:
                accepted[i] += 1
    return PositionAcceptance(tuple(reached), tuple(accepted))


def by_arm_prompt(steps: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], PositionAcceptance]:
    """Per-position acceptance of every arm x prompt (rounds pooled; warmup
    steps are never saved)."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for s in steps:
        if int(s.get("round", 1)) < 1:
            continue
        groups.setdefault((s["arm"], s["prompt"]), []).append(s)
    return {key: per_position(rows) for key, rows in groups.items()}


def by_arm(steps: Sequence[Mapping[str, Any]]) -> dict[str, PositionAcceptance]:
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for s in steps:
        if int(s.get("round", 1)) < 1:
            continue
        groups.setdefault(s["arm"], []).append(s)
    return {key: per_position(rows) for key, rows in groups.items()}
