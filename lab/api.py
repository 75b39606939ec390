"""The contracts a plugin implements: Backend and Drafter.

A backend runs one target model on one engine (llama.cpp in process, a
llama-server, MLX, ...). A drafter proposes tokens; backends whose
``accepts_drafters`` is true verify them with the lab's own speculative loop.

Plugins register classes through the hooks in :mod:`lab.hookspecs`. Class
attributes describe the plugin without instantiating it, so ``lab plugins``
and profile validation never load an engine.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, Sequence

from lab.events import Cell, Emit, Status

if TYPE_CHECKING:
    import numpy as np

    from lab.profiles import Arm, RunSettings


def available_cores() -> int:
    """CPU cores this process may run on: the affinity set where the system
    has one (containers and taskset narrow it), else the logical count. The
    engines' default thread count (llama-bench and llama-server count
    physical cores instead), and what the TUI weighs its refresh against."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1  # pragma: no cover - macOS


@dataclass(frozen=True)
class Option:
    """One option a plugin accepts in a profile.

    ``type`` is one of bool, int, float, str, list. A profile value given as a
    list for a non-list option is a sweep: one arm per value.
    """

    name: str
    type: type
    default: Any = None
    help: str = ""
    choices: tuple[Any, ...] | None = None
    required: bool = False

    def describe(self) -> str:
        kind = self.type.__name__
        extra = f" one of {list(self.choices)}" if self.choices else ""
        default = "" if self.default is None else f" (default {self.default!r})"
        return f"{self.name}: {kind}{extra}{default} - {self.help}"


class EngineFailure(Exception):
    """An engine failed in a way that is a result, not a bug in the lab."""

    status: ClassVar[Status] = Status.ERROR

    def __init__(self, message: str, log_excerpt: str = "") -> None:
        super().__init__(message)
        self.log_excerpt = log_excerpt


class EngineOOM(EngineFailure):
    status = Status.OOM


class EngineCrashed(EngineFailure):
    status = Status.CRASHED


class Cancelled(Exception):
    """Raised inside a backend when the runner asked it to stop."""


@dataclass(frozen=True)
class GenerationRequest:
    cell: Cell
    prompt: str
    system: str | None
    chat_template: bool
    max_tokens: int
    temperature: float
    seed: int
    ignore_eos: bool
    n_max: int | None


@dataclass
class Generation:
    """What a backend returns for one cell. Steps and tokens were already
    emitted as events; this is the summary the runner turns into a result."""

    text: str
    ids: list[int]
    prompt_tokens: int
    prompt_s: float
    gen_s: float
    engine_bytes: int | None = None
    # Figures the engine reports about itself, for cross-checks (e.g. a
    # server's predicted_per_second and draft counters).
    engine_report: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BackendContext:
    run: RunSettings
    run_dir: str
    log: Callable[[str], None]


class Backend(ABC):
    """One target model on one engine.

    Life cycle, all on one worker thread: ``load`` once, ``generate`` per
    cell, ``close`` exactly once on every path (also after a failed load).
    ``generate`` emits TokenEvent and StepEvent as tokens land and checks
    ``cancelled()`` between steps. Failures that are results (out of memory,
    a crashed engine) raise EngineOOM / EngineCrashed with a log excerpt.
    """

    name: ClassVar[str]
    stack: ClassVar[str]
    description: ClassVar[str] = ""
    options: ClassVar[tuple[Option, ...]] = ()
    accepts_drafters: ClassVar[bool] = False

    def __init__(self, arm: Arm, ctx: BackendContext) -> None:
        self.arm = arm
        self.ctx = ctx

    @classmethod
    def is_speculative(cls, arm_options: Mapping[str, Any], drafter: str | None) -> bool:
        """Whether an arm with these options drafts; baselines do not."""
        return drafter is not None

    def pauses_between_steps(self) -> bool:
        """Whether ``generate`` calls ``cancelled()`` only between steps, with
        no engine work in flight and its clocks able to lose the time spent
        there: the runner then holds a paused run inside the cell and takes
        the held time out of ``gen_s``. Otherwise a pause waits for the cell
        to end (a server keeps generating while a client waits)."""
        return False

    # The option that puts layers on a GPU (llama.cpp's n_gpu_layers), if
    # the backend has one: set to a non-zero value, its CPU threads mostly
    # wait for the GPU.
    gpu_layers_option: ClassVar[str | None] = None

    @classmethod
    def busy_cores(cls, arm_options: Mapping[str, Any], threads: int) -> int:
        """CPU cores this arm's engine keeps busy while it generates, given
        ``[run] threads`` (0: the engine's default). The TUI repaints less
        often when none is left for it. Default: every thread computes on
        the CPU, unless ``gpu_layers_option`` offloads (then 1). An engine
        that always computes elsewhere overrides this."""
        if cls.gpu_layers_option and int(arm_options.get(cls.gpu_layers_option) or 0):
            return 1
        return threads or available_cores()

    @abstractmethod
    def load(self, emit: Emit) -> None: ...

    @abstractmethod
    def generate(
        self, request: GenerationRequest, emit: Emit, cancelled: Callable[[], bool]
    ) -> Generation: ...

    @abstractmethod
    def close(self) -> None: ...

    def engine_bytes(self) -> int | None:
        """Bytes the engine reports for its own buffers, if it tells."""
        return None

    def child_pids(self) -> list[int]:
        """Processes this backend started and must stop in close()."""
        return []

    # Backends with accepts_drafters = True implement these two.
    def vocab_size(self) -> int:
        raise NotImplementedError(f"{self.name} does not run drafter plugins")

    def attach_drafter(self, drafter: Drafter) -> None:
        raise NotImplementedError(f"{self.name} does not run drafter plugins")

    def report(self) -> dict[str, Any]:
        """Arm-level figures the engine keeps (loop overhead, server totals)."""
        return {}

    # Verification cost (``lab probe``). Optional: the ways this backend can
    # measure it, the first being the default; empty when it cannot.
    probe_methods: ClassVar[tuple[str, ...]] = ()

    def probe_needs_load(self, method: str) -> bool:
        """Whether ``method`` runs on the loaded engine (call ``load`` first)
        or on its own (an external tool that loads the model itself)."""
        return True

    def measure_verify_cost(self, widths: Sequence[int], method: str | None = None) -> list[float]:
        """Seconds one target pass takes to verify w tokens of one sequence,
        for each w in ``widths`` (which holds 1): one measurement per call,
        warmed up, each figure the median of a few passes; the caller repeats
        calls for a spread. See :mod:`lab.probe`."""
        raise NotImplementedError(f"{self.name} cannot measure verify cost")

    def probe_notes(self) -> dict[str, Any]:
        """What the last measurement ran (a command, an external tool's raw
        table), saved with the probe."""
        return {}


@dataclass(frozen=True)
class Draft:
    """Tokens a drafter proposes. ``probs`` optionally holds, per drafted
    token, the drafter's full probability distribution over the vocabulary;
    without it the proposal is treated as certain (one-hot), which is exact for
    deterministic drafters such as n-gram lookup."""

    tokens: tuple[int, ...]
    probs: Sequence[np.ndarray] | None = None


@dataclass(frozen=True)
class DrafterContext:
    """What the lab tells a drafter about the target it drafts for."""

    stack: str
    target_model: str | None
    vocab_size: int
    n_ctx: int
    threads: int
    seed: int
    temperature: float
    # Baseline token ids of the same stack for (prompt name, round); None when
    # no baseline has run. The oracle drafter replays these.
    reference: Callable[[str, int], Sequence[int] | None]
    log: Callable[[str], None]


class Drafter(ABC):
    """Proposes up to k tokens that continue a token context.

    ``begin`` is called once per cell with the prompt token ids (time spent
    there counts as prompt processing); ``draft`` is called once per step with
    the whole context (prompt + output so far, including the token the target
    produced last) and returns at most k tokens. A drafter that keeps state
    (a draft model's KV cache) must cope with the context being rolled back
    after rejections: compare with what it saw last time.
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""
    options: ClassVar[tuple[Option, ...]] = ()
    # Stacks whose targets it can draft for; None means any (token-level drafters).
    stacks: ClassVar[frozenset[str] | None] = None

    def __init__(self, options: Mapping[str, Any], ctx: DrafterContext) -> None:
        self.opts = dict(options)
        self.ctx = ctx

    def load(self) -> None:
        """Load models or tables. Called once before the first cell."""

    def begin(self, prompt_ids: Sequence[int], cell: Cell) -> None:
        """A new generation starts with these prompt tokens."""

    @abstractmethod
    def draft(self, context: Sequence[int], k: int) -> Draft: ...

    def close(self) -> None:
        """Free what load() took."""

    def memory_bytes(self) -> int | None:
        return None
