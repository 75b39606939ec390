"""The contracts a plugin implements: Backend and Drafter.

A backend runs one target model on one engine (llama.cpp in process, a
llama-server, MLX, ...): a small core (load, generate, close) plus resource
hints with defaults, and optional capabilities it derives from (Drafting,
DraftModelHost, Probing, Referencing). A drafter proposes tokens; Drafting backends verify
them with the lab's own speculative loop.

Plugins register classes through the hooks in :mod:`lab.hookspecs`. Class
attributes describe the plugin without instantiating it, so ``lab plugins``
and profile validation never load an engine.
"""

from __future__ import annotations

import builtins
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, Protocol, Sequence

from lab.base.draft_policy import FIXED
from lab.base.events import Cell, Emit, Status
from lab.base.machine import available_cores

if TYPE_CHECKING:
    import numpy as np

    from lab.base.profile import Arm, RunSettings


@dataclass(frozen=True)
class Check:
    """One line of ``lab doctor``, registered through ``lab_doctor_checks``:
    ``fix`` is the install line for a failed check; a failed ``required``
    one makes the command fail."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = False


Builder = Callable[[Path], None]
"""Writes a model to the given path (a file or a directory)."""


class RegisterModel(Protocol):
    """What ``lab_register_models`` hands a plugin."""

    def __call__(self, ref: str, builder: Builder, filename: str, version: str = "1") -> None: ...


@dataclass(frozen=True)
class ModelBuilder:
    """A registered model: ``builder`` writes it as ``filename``; ``version``
    goes into the cache key."""

    ref: str
    builder: Builder
    filename: str
    version: str = "1"


@dataclass(frozen=True)
class Option:
    """One option a plugin accepts in a profile.

    ``type`` is one of bool, int, float, str, list. A profile value given as a
    list for a non-list option is a sweep: one arm per value. The profile
    check holds a value to ``min``/``max`` (inclusive; an int without them to
    32 bits) and a list's elements to ``item_type`` before any engine starts;
    ``requires`` maps a value to the options it needs (a ``spec_type`` that
    drafts with a model needs ``draft_model``); ``model_ref`` marks a value
    that names a model, which ``lab check`` looks up.
    """

    name: str
    type: type
    default: Any = None
    help: str = ""
    choices: tuple[Any, ...] | None = None
    required: bool = False
    min: float | None = None
    max: float | None = None
    item_type: builtins.type | None = None
    requires: tuple[tuple[Any, tuple[str, ...]], ...] = ()
    model_ref: bool = False

    def problem(self) -> str | None:
        """What is wrong with this declaration itself, or None: the registry
        asks at load, so that a plugin's mistake here is a load error naming
        it, not a traceback in ``lab plugins`` or a check that passes what no
        engine can take."""
        if not isinstance(self.name, str) or not self.name.isidentifier():
            return f"an option's name must be an identifier, got {self.name!r}"
        if self.type not in OPTION_TYPES:
            return f"type must be one of {', '.join(t.__name__ for t in OPTION_TYPES)}, got {self.type!r}"
        for attr in ("required", "model_ref"):
            if not isinstance(getattr(self, attr), bool):
                return f"{attr} must be true or false, got {getattr(self, attr)!r}"
        if not isinstance(self.help, str):
            return f"help must be a string, got {type(self.help).__name__}"
        if self.item_type is not None and (self.type is not list or self.item_type not in OPTION_TYPES[:-1]):
            return f"item_type {self.item_type!r} needs type list and one of bool, int, float, str"
        for attr in ("min", "max"):
            bound = getattr(self, attr)
            if bound is not None and not _finite_number(bound):
                return f"{attr} must be a finite number or None, got {bound!r}"
        if self.min is not None and self.max is not None and self.min > self.max:
            return f"min {self.min!r} is above max {self.max!r}"
        if (self.min is not None or self.max is not None) and self.type not in (int, float, list):
            return f"min and max bound numbers; a {self.type.__name__} option takes none"
        if self.choices is not None:
            if not isinstance(self.choices, tuple) or not self.choices:
                return f"choices must be a non-empty tuple, got {self.choices!r}"
            bad = [c for c in self.choices if not _of_type(c, self.type)]
            if bad:
                return f"choice {bad[0]!r} is not a {self.type.__name__}"
        if self.default is not None:
            if not _of_type(self.default, self.type):
                return f"default {self.default!r} is not a {self.type.__name__}"
            if self.type is list and self.item_type is not None:
                if any(not _of_type(v, self.item_type) for v in self.default):
                    return f"default {self.default!r} holds a value that is not a {self.item_type.__name__}"
            if self.choices is not None and self.default not in self.choices:
                return f"default {self.default!r} is not one of its choices"
        # (value, (option names...)) pairs, or a mapping of the same
        pairs = (list(self.requires.items()) if isinstance(self.requires, Mapping)
                 else self.requires if isinstance(self.requires, tuple) else None)
        if self.requires is not None and (pairs is None or not all(
            isinstance(r, tuple) and len(r) == 2 and isinstance(r[1], tuple) and all(isinstance(n, str) for n in r[1])
            for r in pairs
        )):
            return "requires must be a tuple of (value, (option names...)) pairs"
        return None

    def describe(self) -> str:
        from lab.base.limits import range_note

        kind = self.type.__name__
        extra = f" one of {list(self.choices)}" if self.choices else ""
        default = "" if self.default is None else f" (default {self.default!r})"
        return f"{self.name}: {kind}{range_note(self)}{extra}{default} - {self.help}"


# The types an option may have (list last: item_type is one of the others).
OPTION_TYPES: tuple[type, ...] = (bool, int, float, str, list)


def _finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and abs(value) != float("inf")


def _of_type(value: Any, kind: type) -> bool:
    """Whether ``value`` is what a profile may give for ``kind``: a bool is
    no int, an int is a float."""
    if kind is float:
        return _finite_number(value)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def with_defaults(declared: Sequence[Option], values: Mapping[str, Any]) -> dict[str, Any]:
    """Every declared option, the profile's value where it set one and the
    declared default elsewhere (values it does not declare kept as given):
    what a plugin reads as ``self.opts``, so ``opts[name]`` always works."""
    return {**{o.name: o.default for o in declared}, **values}


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
    # Unconditional rates per draft position (lab.base.set_acceptance): keep the
    # drafted tokens of a step at these rates instead of by agreement with
    # the target. None: the target decides. Only sent to a backend whose
    # class says ``sets_acceptance``.
    acceptance: tuple[float, ...] | None = None
    # How many tokens each step asks the drafter for, up to n_max
    # (lab.base.draft_policy); the lab's own loop follows it.
    draft_policy: str = FIXED


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
    # For a probe that times whole requests (Probing.probe_times_requests):
    # the tokens of a timed request and of a warmup one, as the run's cells
    # generate them; None: the probe's own lengths (``lab probe`` alone).
    probe_requests: tuple[int, int] | None = None


class ResourceHints:
    """What a backend tells the runner and the live view about the resources
    its engine uses. Every :class:`Backend` answers these (it derives from
    this class); the defaults fit an engine in this process that computes on
    the CPU and keeps no figures of its own. Override what the engine knows.
    """

    # The option that puts layers on a GPU (llama.cpp's n_gpu_layers), if
    # the backend has one: set to a non-zero value, its CPU threads mostly
    # wait for the GPU.
    gpu_layers_option: ClassVar[str | None] = None

    @classmethod
    def busy_cores(cls, arm_options: Mapping[str, Any], threads: int) -> int:
        """CPU cores this arm's engine keeps busy while it generates.

        Args:
            arm_options: the arm's backend options from the profile.
            threads: ``[run] threads`` (0: the engine's default).

        Returns:
            A core count; the TUI repaints less often when none is left for
            it. Default: every thread computes on the CPU, unless
            ``gpu_layers_option`` offloads (then 1).
        """
        if cls.gpu_layers_option and int(arm_options.get(cls.gpu_layers_option) or 0):
            return 1
        return threads or available_cores()

    def pauses_between_steps(self) -> bool:
        """Whether ``generate`` calls ``cancelled()`` only between steps, with
        no engine work in flight and its clocks able to lose the time spent
        there: the runner then holds a paused run inside the cell and takes
        the held time out of ``gen_s``. Otherwise a pause waits for the cell
        to end (a server keeps generating while a client waits)."""
        return False

    def child_pids(self) -> list[int]:
        """Processes this backend started (a server): the memory sampler
        counts them, and ``close`` must stop them."""
        return []

    def engine_pids(self) -> list[int]:
        """Processes that are this arm's engine, for the noise guard: the
        ones it started and, for an attached local server, that server
        (which the lab neither started nor stops)."""
        return self.child_pids()

    def engine_bytes(self) -> int | None:
        """Bytes the engine reports for its own buffers, or None if it does
        not tell."""
        return None

    def report(self) -> dict[str, Any]:
        """Arm-level figures the engine keeps (loop overhead, server
        totals), saved with the run once the arm ends."""
        return {}


class Backend(ResourceHints, ABC):
    """One target model on one engine: the contract every backend plugin
    implements.

    Life cycle, all on one worker thread: ``load`` once, ``generate`` per
    cell, ``close`` exactly once on every path (also after a failed load).
    What a backend can do beyond that is a capability it derives from:
    :class:`Drafting` (runs drafter plugins), :class:`DraftModelHost` (runs a
    draft model on its engine), :class:`Probing` (measures verify cost),
    :class:`Referencing` (times plain decoding with the engine's own tool).
    Callers test for them with ``isinstance``/``issubclass``.

    Class attributes describe the plugin without loading an engine.
    """

    name: ClassVar[str]
    stack: ClassVar[str]
    description: ClassVar[str] = ""
    options: ClassVar[tuple[Option, ...]] = ()
    # True exactly when the class is a Drafting backend (the registry checks).
    accepts_drafters: ClassVar[bool] = False
    # Tokens a generation may deliver beyond the request's max_tokens, as the
    # engine documents it (a row with more is an error: lab.rows.plausible).
    max_overshoot_tokens: ClassVar[int] = 0

    def __init__(self, arm: Arm, ctx: BackendContext) -> None:
        self.arm = arm
        self.ctx = ctx
        # the arm's options with every declared default filled in
        self.opts = with_defaults(self.options, arm.options)

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> list[str]:
        """Problems with how options go together that no single option's
        type or range can say (``a must be below b``), one line each; empty:
        none. Called by ``lab check`` and ``lab run`` before anything loads,
        once per arm a sweep makes, with every declared option present (the
        defaults filled in); a problem is refused with the profile's file,
        line and the arm's ``options`` key."""
        return []

    @classmethod
    def needs_model(cls, arm_options: Mapping[str, Any]) -> bool:
        """Whether an arm with these options must name ``model``: ``lab check``
        refuses one that does not. A backend that attaches to a running
        server by URL needs none then (the server brings its own)."""
        return False

    @classmethod
    def refuse_options(cls, arm_options: Mapping[str, Any]) -> tuple[str, str] | None:
        """``(option, why)`` for a combination the options' types cannot
        refuse (a server bound beyond loopback without the profile allowing
        it); ``lab check`` refuses the arm with it. None: nothing refused."""
        return None

    @classmethod
    def warn_options(cls, arm_options: Mapping[str, Any]) -> list[str]:
        """What a user should hear before the run about options that are
        allowed but worth a word; printed by ``lab run`` and ``lab check``."""
        return []

    @classmethod
    def is_speculative(cls, arm_options: Mapping[str, Any], drafter: str | None) -> bool:
        """Whether an arm with these options drafts; baselines do not."""
        return drafter is not None

    @classmethod
    def sets_acceptance(cls, arm_options: Mapping[str, Any]) -> bool:
        """Whether a drafting arm with these options can keep its drafted
        tokens at set rates (``GenerationRequest.acceptance``, see
        :mod:`lab.base.set_acceptance`) instead of by agreement with the target;
        ``lab check`` refuses the arm key ``acceptance`` otherwise."""
        return False

    @classmethod
    def reference_tool(cls, arm_options: Mapping[str, Any]) -> str | None:
        """The engine's own tool a baseline arm with these options can be
        held against (``[run] reference = true``), as the report names it
        ("llama-bench tg"), or None: none. A backend that names one is also
        :class:`Referencing`; ``lab check`` refuses ``reference = true`` in
        a profile none of whose baselines has one."""
        return None

    @classmethod
    def round_state(cls, arm_options: Mapping[str, Any]) -> str:
        """What the engine of an arm with these options keeps from one
        request to the next that changes the next one, and so how a cold
        round meets it in the state the first round met (one of
        :data:`ROUND_STATES`):

        - ``"none"``: it keeps nothing (prompt caches off, a stateless
          drafter); rounds are repeats as they come.
        - ``"reset"``: :meth:`reset_round` clears that state in place.
        - ``"restart"``: nothing short of a new engine clears it;
          :meth:`reset_round` restarts it, outside any cell's clock.

        The runner calls :meth:`reset_round` before every measured cell
        that follows another generation on the same backend; when the
        profile asks for warm rounds (``[run] warm_rounds = true``), only
        before each prompt's round 1, so that the later rounds, which meet
        what it left, are held to a cold first round.
        """
        return "none"

    def reset_round(self, emit: Emit) -> None:
        """Bring the engine back to the state the arm's first cell met (see
        :meth:`round_state`); nothing to do for ``"none"``. Emits loading
        statuses like ``load`` while it works.

        Raises:
            EngineFailure, EngineCrashed: as from ``load``; the cell is
                recorded with that failure.
        """

    @abstractmethod
    def load(self, emit: Emit) -> None:
        """Load the arm's model on the engine (start it, if it is a process).

        Args:
            emit: takes StatusChanged events (status ``loading``, a phase and
                progress) while loading runs.

        Raises:
            EngineOOM: the model or its context does not fit.
            EngineCrashed: the engine process died.
            EngineFailure: any other failure that is a result of the arm.
            Exception: anything else is reported as a load error.
        """

    @abstractmethod
    def generate(self, request: GenerationRequest, emit: Emit, cancelled: Callable[[], bool]) -> Generation:
        """Generate one cell.

        Args:
            request: the cell, its prompt and the run's sampling settings.
            emit: takes a TokenEvent as tokens land (their texts concatenate
                to the returned text) and a StepEvent per speculative step,
                its ``index`` counting the cell's steps from 0.
            cancelled: polled between steps; when it returns True, stop.

        Returns:
            The cell's summary; steps and tokens were already emitted.

        Raises:
            Cancelled: ``cancelled()`` returned True.
            EngineOOM, EngineCrashed, EngineFailure: the cell's result is
                that failure (an OOM, a crash, an engine error).
        """

    @abstractmethod
    def close(self) -> None:
        """Free the engine and stop every process in ``child_pids``. Called
        exactly once, also after a failed or partial ``load``; must not
        raise for a backend that never loaded."""


class Drafting(ABC):
    """Capability of a backend that verifies drafter plugins' proposals
    with the lab's own loop (:mod:`lab.kit.speculative`). Such a backend sets
    ``accepts_drafters = True``."""

    @abstractmethod
    def vocab_size(self) -> int:
        """Tokens in the loaded target's vocabulary (what drafted ids index).

        Returns:
            The vocabulary size; only called after ``load``.
        """

    @abstractmethod
    def attach_drafter(self, drafter: Drafter) -> None:
        """Use ``drafter`` (already loaded) for every following cell.

        Args:
            drafter: proposes tokens each step; the backend calls its
                ``begin`` per cell and ``draft`` per step, and counts its
                ``memory_bytes`` in ``engine_bytes``.
        """


DraftModelFactory = Callable[[Mapping[str, Any], "DrafterContext"], "Drafter"]
"""Builds a drafter that runs a draft model on a backend's engine, from the
drafter's options and context (see :class:`DraftModelHost`)."""


class DraftModelHost(ABC):
    """Capability of a backend whose engine can also run a draft model (a
    smaller model with the target's vocabulary). The runner hands the
    ``draft_model`` method to the drafter through
    :attr:`DrafterContext.draft_model`, so a draft-model drafter gets the
    engine it needs without knowing the plugin."""

    @abstractmethod
    def draft_model(self, options: Mapping[str, Any], ctx: DrafterContext) -> Drafter:
        """A drafter running the model ``options["model"]`` on this engine.

        Args:
            options: the draft-model drafter's options (``model``,
                ``n_ctx``, ``threads``).
            ctx: the drafter's context; ``ctx.vocab_size`` is the target's.

        Returns:
            An unloaded drafter; its ``load`` loads the model where this
            backend's engine work runs (the same thread, for MLX).
        """


class Probing(ABC):
    """Capability of a backend that measures verification cost (``lab
    probe``): seconds of one target pass over w tokens, or, for an engine
    that runs the speculative loop itself (a server), of one whole step
    that verified w tokens (see :meth:`probe_notes`). See
    :mod:`lab.probing.driver`."""

    # The ways this backend can measure, the first being the default.
    probe_methods: ClassVar[tuple[str, ...]] = ()
    # The methods that can place a KV depth before the timed passes (``lab
    # probe --depths``, :meth:`measure_verify_cost_at_depth`); none by default:
    # a probe at a depth is then refused before anything loads.
    probe_depth_methods: ClassVar[tuple[str, ...]] = ()
    # Whether the probe times whole generation requests (a server's steps),
    # whose figures move with a request's length and warmup: a run's probe
    # then sends requests as long as its cells' (BackendContext.probe_requests).
    probe_times_requests: ClassVar[bool] = False

    def probe_needs_load(self, method: str) -> bool:
        """Whether ``method`` runs on the loaded engine (call ``load`` first)
        or on its own (an external tool that loads the model itself)."""
        return True

    @abstractmethod
    def measure_verify_cost(self, widths: Sequence[int], method: str | None = None) -> list[float]:
        """Time one target pass per width.

        Args:
            widths: token counts of one sequence to verify in one pass; holds 1.
            method: one of ``probe_methods``; None for the first.

        Returns:
            Seconds per pass for each width, warmed up, each the median of
            a few passes; the caller repeats calls for a spread.

        Raises:
            ValueError: an unknown method.
            RuntimeError: the method needs ``load`` and it has not run.
        """

    def measure_verify_cost_at_depth(self, widths: Sequence[int], depth: int, method: str | None = None) -> list[float]:
        """:meth:`measure_verify_cost` with ``depth`` tokens in the KV cache
        before each timed pass (the passes attend to them), for a method in
        ``probe_depth_methods``; the lab calls it for no other.

        Raises:
            ValueError: the context cannot hold ``depth`` plus the widest
                width (the message names both), or an unknown method.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot place a KV depth before its timed passes")

    @classmethod
    def probe_refusal(cls, arm_options: Mapping[str, Any]) -> str | None:
        """Why an arm with these options cannot be probed on this backend
        (a run then says so and prices the arm by no probe of its own), or
        None when it can: the default."""
        return None

    def probe_notes(self) -> dict[str, Any]:
        """What the last measurement ran (a command, an external tool's raw
        table), saved with the probe. ``"prices": "steps"``
        (:data:`lab.base.probe.PRICES_STEPS`) says the figures above width 1
        are whole steps, the draft's cost inside; ``"priced_by"`` names what
        measured them."""
        return {}


# How a reference tool counts its rate (``Referencing.measure_reference``):
# "decodes": one-token decodes over their own time (llama-bench tg, which
# times N decodes); "tokens": generated tokens over the generation phase,
# whose clock starts at the first token (the lab's tok_per_s, a llama-server's
# predicted_per_second). The lab's baseline is compared counted the same way.
REFERENCE_COUNTS = ("decodes", "tokens")


class Referencing(ABC):
    """Capability of a backend whose engine times plain decoding with a
    tool of its own, outside the lab's loop (llama-bench's tg on the same
    model and settings; a bare request to the same server): with ``[run]
    reference = true`` the runner measures it once per baseline arm after
    the arm's last cell, so it never runs beside a timed cell, and the
    report's Conditions say how the lab's baseline compares with it."""

    def reference_needs_load(self) -> bool:
        """Whether the reference runs against the loaded engine (measured
        before ``close``: a request to the arm's own server) or on its own
        (after ``close``: a tool that loads the model itself, so that two
        copies of the weights are never held at once)."""
        return True

    @abstractmethod
    def measure_reference(self, request: GenerationRequest, prompt_tokens: int | None) -> dict[str, Any]:
        """Time plain decoding with the engine's own tool.

        Args:
            request: the arm's first prompt as its cells sent it (its
                ``max_tokens`` is the length to time).
            prompt_tokens: what that prompt came to in the arm's own rows
                (the context depth its decodes ran at), None if unknown.

        Returns:
            ``tool`` (as :meth:`Backend.reference_tool` names it),
            ``tok_per_s`` (the tool's own figure), ``counts`` (one of
            :data:`REFERENCE_COUNTS`), ``n_tokens``, ``command`` (what ran,
            as a user would type it) and ``settings`` (the flags that match
            the arm's); anything else the tool reported may go beside.

        Raises:
            Exception: the tool failed; the run records the failure in
                place of the figure and goes on.
        """


class DivergenceExplaining(ABC):
    """Capability of a Drafting backend that tells why a greedy speculative
    output left its stack's baseline, when it did.

    Greedy speculation keeps the target's output only if the target computes
    a position's logits the same way alone (the baseline's one-row decodes)
    as in a verify batch; engines whose kernels depend on the batch's width
    flip near ties. Such a backend checks every greedy speculative cell that
    left its baseline (``DrafterContext.reference``) after the cell's clocks
    stopped, and puts the evidence in ``Generation.engine_report`` under
    ``"divergence"``: a mapping with ``cause`` (one of
    ``DIVERGENCE_CAUSES``), the first differing ``token``, and the check's
    figures (see :mod:`lab.render.divergence`). A backend without it leaves
    the cause not established.
    """

    @abstractmethod
    def divergence_notes(self) -> dict[str, Any]:
        """How a user reproduces the engine's batch variance and gets a
        bit-exact comparison on this backend: ``repro`` (a command) and
        ``bit_exact`` (the setting and its measured cost), shown beside the
        evidence."""


# Causes a divergence check can name. "engine batch variance": the same
# context computed as one row and as a row of a w-row verify picks different
# tokens (or its KV, computed in batches, does); "engine non-determinism":
# the engine does not repeat its own one-row decode; "not established": the
# check could not tell (or the backend has none).
DIVERGENCE_CAUSES = ("engine batch variance", "engine non-determinism", "not established")


class Rehearsing(ABC):
    """Capability of a drafter whose proposals depend on the verify loop's
    own output, such as the oracle, which replays a transcript: before the
    timed pass of a greedy cell, :func:`lab.kit.speculative.generate` runs the
    loop untimed and silent (no events, no clocks) and hands the drafter
    what it produced, until the drafter wants no more or
    ``max_rehearsals`` passes ran. Every pass, rehearsed or timed, starts
    with ``begin`` as usual.
    """

    max_rehearsals: ClassVar[int] = 4

    @abstractmethod
    def wants_rehearsal(self, prompt_ids: Sequence[int], cell: Cell) -> bool:
        """Whether another untimed pass of this cell should run before the
        timed one."""

    @abstractmethod
    def rehearsed(self, output_ids: Sequence[int]) -> None:
        """The output ids of an untimed pass of this cell."""


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
    # The backend's draft-model factory when it is a DraftModelHost: a
    # drafter that runs a model calls it instead of importing an engine.
    draft_model: DraftModelFactory | None = None


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
    # Whether it replays a baseline arm's output (DrafterContext.reference):
    # an arm using it then needs a baseline arm of the same stack.
    needs_baseline: ClassVar[bool] = False
    # Whether what it drafts for a cell depends on the cells before it (a
    # cache it builds from earlier requests' text). Cold rounds (the default)
    # call ``forget`` before each measured cell so every round drafts as the
    # first did; warm rounds let it learn, and the report shows the trend.
    keeps_state: ClassVar[bool] = False

    def __init__(self, options: Mapping[str, Any], ctx: DrafterContext) -> None:
        # every declared option, the default where the profile set none
        self.opts = with_defaults(self.options, options)
        self.ctx = ctx

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> list[str]:
        """Problems with how the drafter's options go together (one line
        each; empty: none), as :meth:`Backend.check_options` does for a
        backend: refused at profile check time with file, line and the
        arm's ``drafter_options`` key."""
        return []

    def load(self) -> None:
        """Load models or tables. Called once before the first cell."""

    def begin(self, prompt_ids: Sequence[int], cell: Cell) -> None:
        """A new generation starts with these prompt tokens."""

    def forget(self) -> None:
        """Drop what earlier cells taught it (only called when
        ``keeps_state``): the next cell drafts as the arm's first did."""

    @abstractmethod
    def draft(self, context: Sequence[int], k: int) -> Draft: ...

    def close(self) -> None:
        """Free what load() took."""

    def memory_bytes(self) -> int | None:
        return None


ROUND_STATES = ("none", "reset", "restart")
"""What :meth:`Backend.round_state` may answer."""


# Everything the core reads from a plugin class, per contract class, and
# what kind of thing it must be (METHOD: something callable). The registry holds every registered class
# to it at load (lab.registry), the one place a plugin class is inspected;
# everywhere else the core reads these as plain attributes. Each is
# declared above with its default, except the names a plugin must give.
METHOD = "method"
CAPABILITIES: dict[type, dict[str, type | tuple[type, ...] | str]] = {
    Backend: {
        "name": str, "stack": str, "description": str, "options": tuple, "accepts_drafters": bool,
        "sets_acceptance": METHOD, "reference_tool": METHOD,
        "max_overshoot_tokens": int, "gpu_layers_option": (str, type(None)), "needs_model": METHOD, "refuse_options": METHOD,
        "warn_options": METHOD, "is_speculative": METHOD, "busy_cores": METHOD, "round_state": METHOD,
        "check_options": METHOD,
    },
    Probing: {
        "probe_methods": tuple, "probe_depth_methods": tuple, "probe_needs_load": METHOD,
        "measure_verify_cost": METHOD, "measure_verify_cost_at_depth": METHOD, "probe_refusal": METHOD,
        "probe_notes": METHOD,
    },
    Drafter: {
        "name": str, "description": str, "options": tuple, "stacks": (frozenset, type(None)),
        "needs_baseline": bool, "keeps_state": bool, "check_options": METHOD,
    },
}
