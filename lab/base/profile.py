"""What a profile is once read: frozen dataclasses the whole lab shares."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from lab.base.draft_policy import FIXED
from lab.base.set_acceptance import SetAcceptance


@dataclass(frozen=True)
class RunSettings:
    max_tokens: int = 400
    temperature: float = 0.0
    seed: int = 0
    rounds: int = 2
    warmup: int = 1
    # tokens a warmup cell generates (0: max_tokens); its tokens are thrown away
    warmup_tokens: int = 64
    # rounds that share engine state (no reset between cells): a trend, not repeats
    warm_rounds: bool = False
    chat_template: bool = True
    ignore_eos: bool = True
    n_ctx: int = 4096
    threads: int = 0
    memory_interval_s: float = 0.1
    # the probe: None/true measures (or finds cached) one, false: none, a string: a saved one
    probe: str | bool | None = None
    # KV depth of the probe's timed passes (lab probe --depths); None: the backend's prefix
    probe_depth: int | None = None
    # time baselines with the engine's own tool too (lab.api.Referencing)
    reference: bool = False
    # files the profile reads may lie outside its own directory tree
    allow_outside_paths: bool = False
    # how cells are ordered: "paired", each stack's arms cell by cell beside
    # their baseline's; "arms", one arm's every cell after another's
    order: str = "paired"
    # paired: rounds added while a prompt's paired speedups disagree, up to
    # this many in all (None: rounds + 2, from 2 rounds up; lab.arms.order)
    max_rounds: int | None = None

    def request_lengths(self) -> tuple[int, int]:
        """Tokens of a measured cell and of a warmup one (``warmup_tokens``
        0: a whole cell): what a probe that times requests sends."""
        return self.max_tokens, self.warmup_tokens or self.max_tokens


ORDERS = ("paired", "arms")


@dataclass(frozen=True)
class Deadlines:
    """How long each of an arm's plugin calls may go without a sign of life
    before the lab ends the arm's process and records which call hung:
    ``load`` (the engine and its drafter), ``generate`` (the longest a cell
    may go without a token or a step, prompt processing and every
    ``draft()`` included), ``close``, and ``reference`` (the engine's own
    tool timing the baseline)."""

    load: float = 60.0
    generate: float = 60.0
    close: float = 5.0
    reference: float = 300.0

    def of(self, call: str) -> float:
        return float(getattr(self, call))


DEADLINE_CALLS = ("load", "generate", "close", "reference")


@dataclass(frozen=True)
class Prompt:
    name: str
    text: str
    system: str | None = None
    # Set for prompts a suite line expanded (lab.profile.suites); None for a
    # prompt written out in the profile.
    category: str | None = None
    # the suite's turns; only the first is sent
    turns: int = 1


@dataclass(frozen=True)
class Arm:
    name: str
    backend: str
    model: str | None
    drafter: str | None
    n_max: int | None
    options: Mapping[str, Any]
    drafter_options: Mapping[str, Any]
    baseline: str | None  # name of this arm's baseline; None for a baseline arm
    is_baseline: bool
    stack: str
    group: str  # the profile entry a sweep came from
    sweep: Mapping[str, Any] = field(default_factory=dict)
    # drafted tokens kept at set rates, not by agreement (lab.base.set_acceptance)
    acceptance: SetAcceptance | None = None
    # how many tokens each step asks the drafter for, up to n_max (lab.base.draft_policy)
    draft_policy: str = FIXED
    deadlines: Deadlines = field(default_factory=Deadlines)

    @property
    def set_rates(self) -> tuple[float, ...] | None:
        """The unconditional rates per draft position this arm keeps drafted
        tokens at, or None when the target decides (the usual case)."""
        if self.acceptance is None or not self.n_max:
            return None
        return self.acceptance.rates(self.n_max)


@dataclass(frozen=True)
class Profile:
    name: str
    path: str
    description: str
    run: RunSettings
    prompts: tuple[Prompt, ...]
    arms: tuple[Arm, ...]
    source: str

    def arm(self, name: str) -> Arm:
        for arm in self.arms:
            if arm.name == name:
                return arm
        raise KeyError(name)

    def ordered_arms(self) -> list[Arm]:
        """Baselines first (speculative arms and the oracle need their
        tokens), then the rest in profile order, except that an arm compared
        to another compared arm (``baseline = "..."``) runs after it."""
        out = [a for a in self.arms if a.is_baseline]
        placed = {a.name for a in out}
        rest = [a for a in self.arms if not a.is_baseline]
        while rest:
            ready = next((a for a in rest if a.baseline is None or a.baseline in placed), rest[0])
            out.append(ready)
            placed.add(ready.name)
            rest.remove(ready)
        return out
