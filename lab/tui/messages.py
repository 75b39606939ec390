"""Messages that carry runner events into the UI.
Posted from the runner's thread by :class:`lab.tui.bridge.EventBridge`."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from lab.base import metrics
from lab.base.events import Cell, StatusChanged, StepEvent
from lab.base.row import ResultRow
from lab.profile.engines import EngineProblem
from lab.telemetry.gpu import GpuSampled


@dataclass(frozen=True)
class ArmMetrics:
    """Live figures of one arm's current cell, read off event timestamps.
    Acceptance and mean accepted length are the saved row's figures
    (lab.base.metrics) over the steps so far."""

    arm: str
    prompt: str
    round: int
    tokens: int
    tok_per_s: float | None
    steps: int
    drafted: int
    accepted: int
    landed: int
    last_draft_ms: float | None
    last_verify_ms: float | None
    mem_bytes: int | None
    peak_mem_bytes: int | None
    ttft_s: float | None = None  # from the cell's start to its first token, once it landed

    @property
    def acceptance_rate(self) -> float | None:
        return metrics.acceptance_rate(self.accepted, self.drafted)

    @property
    def mean_accepted_len(self) -> float | None:
        return metrics.mean_accepted_len(self.landed, self.steps)


@dataclass
class GpuSampledLive(Message, bubble=False):
    reading: GpuSampled

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, GpuSampledLive) and message.reading.arm == self.reading.arm


@dataclass
class RunBegan(Message, bubble=False):
    run_dir: str
    arms: tuple[str, ...]
    prompts: tuple[str, ...]
    rounds: int


@dataclass
class TokensLanded(Message, bubble=False):
    """Text that landed in one cell since the last batch: ``segments`` (text,
    from accepted drafts), ``rate`` (seconds since first token, tok/s),
    ``rejected`` (characters into the text, drafts rejected) per step."""

    cell: Cell
    segments: tuple[tuple[str, bool], ...]
    steps: tuple[StepEvent, ...]
    rate: tuple[float, float] | None
    rejected: tuple[tuple[int, int], ...] = ()


@dataclass
class ArmMetricsUpdated(Message, bubble=False):
    metrics: ArmMetrics

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, ArmMetricsUpdated) and message.metrics.arm == self.metrics.arm


@dataclass
class ArmStatusChanged(Message, bubble=False):
    event: StatusChanged


@dataclass
class CellFinished(Message, bubble=False):
    """A cell finished with ``row``, which the runner keeps (its rows are
    the session's ``rows()``)."""

    cell: Cell
    row: ResultRow


@dataclass
class ProbeProgress(Message, bubble=False):
    """A line of the probe phase, before any arm runs (the runner's
    ProbeReported): ``done`` false while ``stack`` is being measured."""

    stack: str
    text: str
    done: bool


@dataclass
class RunEnded(Message, bubble=False):
    run_dir: str
    cancelled: bool


@dataclass
class EnginesMissing(Message, bubble=False):
    """Arms whose engine cannot load here (lab.profile.engines), found when
    the profile opened or as a run was asked for: nothing ran."""

    problems: tuple[EngineProblem, ...]


@dataclass
class RunFailed(Message, bubble=False):
    """The run's worker stopped with an error (the app shows it)."""


@dataclass
class PauseChanged(Message, bubble=False):
    paused: bool
    holding: bool  # the runner is waiting at the gate right now
