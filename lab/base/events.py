"""The one event model that flows engine -> runner -> (store, TUI, CLI).
Frozen events that each name their cell: engines emit :data:`Event`
(tokens, steps, memory, status), the runner adds :data:`RunEvent`s, and
every consumer is a :data:`Listener` the runner knows nothing of.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Mapping, Union

from lab.base.cells import Cell, Status, arm_cell, now  # noqa: F401 - the events name their cell
from lab.base.probe import (  # noqa: F401 - a step names its pass's kind
    FIRST_PASS,
    PASS_KINDS,
    SECOND_PASS,
    STEADY_PASS,
    SWITCH_PASS,
    ProbeReported,
)
from lab.base.row import ResultRow


@dataclass(frozen=True)
class TokenEvent:
    """Tokens that landed in the output; ``from_draft``: accepted drafts."""

    cell: Cell
    text: str
    ids: tuple[int, ...]
    from_draft: bool
    t: float = field(default_factory=now)


class Clock(str, Enum):
    """Where one of a step's seconds came from."""

    MEASURED = "measured"  # the lab's clock around the engine call, after it synchronized
    SERVER_LOG = "server-log"  # timestamps of the engine's own per-step log lines
    SERVER_TIMINGS = "server-timings"  # the engine's streamed generation clock
    ENGINE = "engine"  # the engine's own per-step timers, reported with the step
    CLIENT = "client-clock"  # arrival times of streamed chunks at the lab
    SERVER_TOTAL_PER_CALL = "server-total/calls"  # derived: an engine total / its calls
    STEP_MINUS_DRAFT = "step-draft"  # derived: step seconds less draft seconds
    UNKNOWN = "unknown"
    NONE = "none"  # not known: the figure is None


@dataclass(frozen=True)
class StepClocks:
    """Which of a step's draft_s / verify_s / step_s are clocks and which are
    derived, and from what."""

    draft: Clock = Clock.MEASURED
    verify: Clock = Clock.MEASURED
    step: Clock = Clock.MEASURED

    def label(self) -> str:
        """The saved form: "draft,verify,step" when the lab clocked all three,
        else "step=...;draft=...;verify=..."."""
        if self == ALL_MEASURED:
            return "draft,verify,step"
        if self == STEP_ONLY:
            return "step"
        return f"step={self.step.value};draft={self.draft.value};verify={self.verify.value}"


ALL_MEASURED = StepClocks()
# A fused pass the lab times only as a whole (draft and verify in one call).
STEP_ONLY = StepClocks(draft=Clock.NONE, verify=Clock.NONE, step=Clock.MEASURED)


@dataclass(frozen=True)
class StepEvent:
    """One speculative step (``index`` from 0 in its cell): ``landed``
    tokens (accepted + 1, less at the token budget), seconds after the engine
    synchronized, ``clocks`` saying which are clocks, ``pass_kind`` where
    the loop tells it."""

    cell: Cell
    index: int
    drafted: int
    accepted: int
    landed: int
    draft_s: float | None
    verify_s: float | None
    step_s: float
    clocks: StepClocks = ALL_MEASURED
    pass_kind: str | None = None
    t: float = field(default_factory=now)

    @property
    def measured(self) -> str:
        """``clocks`` in its saved form."""
        return self.clocks.label()

    def record(self) -> dict[str, Any]:
        """The step as steps.jsonl saves it."""
        record = {
            "arm": self.cell.arm, "prompt": self.cell.prompt, "round": self.cell.round,
            **{k: getattr(self, k) for k in STEP_COUNT_KEYS + STEP_SECONDS_KEYS}, "measured": self.measured,
        }
        if self.pass_kind is not None:
            record["pass_kind"] = self.pass_kind
        return record


# A saved step's counts and seconds (StepEvent.record; lab.rows.shape checks them).
STEP_COUNT_KEYS = ("index", "drafted", "accepted", "landed")
STEP_SECONDS_KEYS = ("draft_s", "verify_s", "step_s")
# a saved step that rejected drafts: where they go, in characters into its cell's text
REJECTED_AT = "rejected_at"


@dataclass
class DraftMarks:
    """Where each step of one cell puts its rejected drafts (None: it rejected
    none): characters into the cell's text, before the target's token in their place."""

    chars: int = 0
    owed: int = 0  # characters of the target's token landed since the last step

    def token(self, event: TokenEvent) -> None:
        self.chars += len(event.text)
        self.owed = 0 if event.from_draft else len(event.text)

    def step(self, event: StepEvent) -> int | None:
        owed, self.owed = self.owed, 0
        if event.drafted <= event.accepted:
            return None
        return self.chars - (owed if event.landed > event.accepted else 0)


@dataclass(frozen=True)
class MemorySample:
    """A live memory reading: the engine's own buffers where it tells, and
    accelerator memory where it can be read."""

    arm: str
    rss_bytes: int
    engine_bytes: int | None = None
    device_bytes: int | None = None
    t: float = field(default_factory=now)


@dataclass(frozen=True)
class StatusChanged:
    """An arm (prompt "" and round -1) or a cell changed status; ``phase``
    names what loading does, ``detail`` a failure's text."""

    cell: Cell
    status: Status
    phase: str = ""
    detail: str = ""
    progress: float | None = None
    t: float = field(default_factory=now)


@dataclass(frozen=True)
class Finished:
    """A cell finished: its full result row (see lab.rows.build.ResultRow)."""

    cell: Cell
    result: ResultRow
    t: float = field(default_factory=now)


@dataclass(frozen=True)
class Held:
    """The runner holds ``cell`` paused: ``seconds`` None as the hold begins,
    the time held as it ends; ``in_cell``: between two steps of the cell."""

    cell: Cell
    seconds: float | None = None
    in_cell: bool = False
    t: float = field(default_factory=now)


@dataclass(frozen=True)
class RunStarted:
    """``runs_before``: the runs this process started before this one (an
    earlier run can leave a GPU slower)."""

    profile: str
    run_dir: str
    arms: tuple[str, ...]
    prompts: tuple[str, ...]
    rounds: int
    runs_before: int = 0
    # ``[run] threads = 0`` as resolved (lab.telemetry.contention.fitting_threads)
    threads: Mapping[str, Any] | None = None
    t: float = field(default_factory=now)


@dataclass(frozen=True)
class RunFinished:
    run_dir: str
    cancelled: bool = False
    t: float = field(default_factory=now)


Event = Union[
    TokenEvent, StepEvent, MemorySample, StatusChanged, Held, Finished, RunStarted, RunFinished
]
Emit = Callable[[Event], None]


@dataclass(frozen=True)
class ArmReported:
    """An arm's engine report (``Backend.report()``: versions, flags, totals
    the engine kept), once, as its engine closes."""

    arm: str
    report: Mapping[str, Any]
    t: float = field(default_factory=now)


@dataclass(frozen=True)
class ReferenceMeasured:
    """A baseline arm's reference timing (``lab.api.Referencing``), or its ``error``."""

    arm: str
    record: Mapping[str, Any]
    # false while it is measured (the record names the tool only)
    done: bool = True
    t: float = field(default_factory=now)


@dataclass(frozen=True)
class Logged:
    """Text for the run's lab.log: tracebacks of what failed and notes from
    backends and drafters (``BackendContext.log``)."""

    text: str
    t: float = field(default_factory=now)


@dataclass(frozen=True)
class OrderPlanned:
    """How the run orders its cells (lab.arms.order) and, per group of arms
    that share a baseline, which engines stay loaded between their cells
    (lab.arms.fit): ``groups`` holds ``{"arms": [...], "resident": [...],
    "note": "..."}`` each."""

    order: str
    words: str
    groups: tuple[Mapping[str, Any], ...] = ()
    t: float = field(default_factory=now)


@dataclass(frozen=True)
class RoundAdded:
    """A round the run added beyond ``[run] rounds`` for ``prompts``, because
    their paired speedups disagreed (lab.arms.order.extra_slots): ``why``."""

    round: int
    prompts: tuple[str, ...]
    why: str
    t: float = field(default_factory=now)


# the probe phase's progress, before any arm (lab.probing.driver)
RunEvent = Union[Event, ArmReported, ReferenceMeasured, Logged, ProbeReported, OrderPlanned, RoundAdded]
Listener = Callable[[RunEvent], None]


def finished_row(event: Finished) -> ResultRow:
    """The row a Finished event carries (a saved-form mapping is read as one)."""
    result: object = event.result
    if isinstance(result, ResultRow):
        return result
    assert isinstance(result, Mapping)
    return ResultRow.from_json(result)
