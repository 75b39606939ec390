"""The contracts a plugin implements: Backend and Drafter.

A backend runs one target model on one engine: load, generate, close, plus
resource hints with defaults and optional capabilities it derives from
(Drafting, DraftModelHost, Probing, Referencing, ...). A drafter proposes
tokens that Drafting backends verify with the lab's own loop. Plugins
register classes through :mod:`lab.hookspecs`; class attributes describe a
plugin without loading an engine.
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

    from lab.base.footprint import MemoryNeeds
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


@dataclass(frozen=True)
class MissingEngine:
    """What an arm's engine lacks on this machine (``Backend.missing_engine``):
    ``engine`` names the module or binary, ``why`` says what failed, and
    ``install`` is the one command that installs it."""

    engine: str
    why: str
    install: str


@dataclass(frozen=True)
class EngineCommand:
    """What a user types to run an arm's configuration with its engine's own
    tool, outside the lab (``Backend.engine_command``): ``argv`` the program
    and its arguments, empty where no tool of the engine's own runs it;
    ``notes`` what the line does not carry of the arm as measured (a loop that
    differs, a setting the tool lacks), or why there is no line."""

    argv: tuple[str, ...]
    notes: tuple[str, ...] = ()

    @property
    def runnable(self) -> bool:
        return bool(self.argv)

    def line(self) -> str:
        """The command as one shell line, each argument quoted where it must be."""
        import shlex

        return shlex.join(self.argv)


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
    """One option a plugin accepts in a profile: ``type`` one of bool, int,
    float, str, list (a list for a non-list option is a sweep), held to
    ``min``/``max`` (an int without them to 32 bits) and ``item_type``
    before any engine starts; ``requires`` maps a value to the options it
    needs; ``model_ref`` marks a value that names a model."""

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
        """What is wrong with this declaration itself, or None (the registry
        asks at load: a mistake here is a load error naming the plugin)."""
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
    # set acceptance (lab.base.set_acceptance): unconditional rates per draft
    # position; None: the target decides. Only for ``sets_acceptance`` backends.
    acceptance: tuple[float, ...] | None = None
    # how many tokens each step asks the drafter for (lab.base.draft_policy)
    draft_policy: str = FIXED


@dataclass
class Generation:
    """What a backend returns for one cell, its events already emitted."""

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
    # (timed, warmup) request tokens for a probe that times requests; None: its own
    probe_requests: tuple[int, int] | None = None


class ResourceHints:
    """What a backend tells the runner and the live view about its engine's
    resources; the defaults fit an in-process CPU engine with no figures of
    its own. Override what the engine knows."""

    # the option that offloads layers to a GPU (its CPU threads then mostly wait)
    gpu_layers_option: ClassVar[str | None] = None

    @classmethod
    def busy_cores(cls, arm_options: Mapping[str, Any], threads: int) -> int:
        """CPU cores this arm's engine keeps busy while it generates, with
        ``threads`` from ``[run]`` (0: the engine's default); default every
        thread, or 1 where ``gpu_layers_option`` offloads."""
        if cls.gpu_layers_option and int(arm_options.get(cls.gpu_layers_option) or 0):
            return 1
        return threads or available_cores()

    def pauses_between_steps(self) -> bool:
        """Whether ``generate`` calls ``cancelled()`` only between steps with no
        engine work in flight, so a pause can hold inside a cell and leave
        ``gen_s``; otherwise a pause waits for the cell to end."""
        return False

    def child_pids(self) -> list[int]:
        """Processes this backend started (a server): the memory sampler
        counts them, and ``close`` must stop them."""
        return []

    def engine_pids(self) -> list[int]:
        """Processes that are this arm's engine, for the noise guard (an
        attached local server included)."""
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
    """One target model on one engine, on one worker thread: ``load`` once,
    ``generate`` per cell, ``close`` exactly once on every path. Capabilities
    beyond that are classes it derives from (:class:`Drafting`,
    :class:`DraftModelHost`, :class:`Probing`, :class:`Referencing`)."""

    name: ClassVar[str]
    stack: ClassVar[str]
    description: ClassVar[str] = ""
    options: ClassVar[tuple[Option, ...]] = ()
    # True exactly when the class is a Drafting backend (the registry checks).
    accepts_drafters: ClassVar[bool] = False
    # tokens a generation may deliver beyond max_tokens (more: lab.rows.plausible refuses)
    max_overshoot_tokens: ClassVar[int] = 0
    # Modules the arm's own process imports before anything else (lab.arms.host):
    # the engine's native libraries, ahead of numpy, whose BLAS may bring an
    # OpenMP runtime that crashes an engine loaded after it. Pure imports that
    # touch no device.
    native_preload: ClassVar[tuple[str, ...]] = ()

    def __init__(self, arm: Arm, ctx: BackendContext) -> None:
        self.arm = arm
        self.ctx = ctx
        # the arm's options with every declared default filled in
        self.opts = with_defaults(self.options, arm.options)

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> list[str]:
        """Problems with how options go together (``a must be below b``), one
        line each, checked before anything loads for every arm a sweep makes,
        defaults filled in; refused with the profile's file and line."""
        return []

    @classmethod
    def needs_model(cls, arm_options: Mapping[str, Any]) -> bool:
        """Whether an arm with these options must name ``model`` (an attached
        server brings its own)."""
        return False

    @classmethod
    def refuse_options(cls, arm_options: Mapping[str, Any]) -> tuple[str, str] | None:
        """``(option, why)`` for a combination ``lab check`` must refuse that
        no type can (a server bound beyond loopback); None: nothing."""
        return None

    @classmethod
    def missing_engine(cls, arm_options: Mapping[str, Any]) -> MissingEngine | None:
        """What this machine lacks to load the engine of an arm with these
        options (a module that does not import, a binary not found), or
        None: nothing. Asked by ``lab check``, ``lab run`` and the TUI
        before anything is measured; a run with a missing engine does not
        start. May take seconds (an import tried in a child interpreter:
        :func:`lab.kit.checks.import_failure`); must not load a model.
        Default: nothing missing."""
        return None

    @classmethod
    def warn_options(cls, arm_options: Mapping[str, Any]) -> list[str]:
        """What a user should hear before the run about options that are
        allowed but worth a word; printed by ``lab run`` and ``lab check``."""
        return []

    @classmethod
    def memory_needs(cls, arm: Arm, run: RunSettings) -> MemoryNeeds | None:
        """What sizes an arm's memory on this engine, before anything loads
        (:class:`lab.base.footprint.MemoryNeeds`): the models it holds (the
        target, a draft, an MTP head, by reference), each with the context,
        KV cache type, batch, verify width and slots the engine gives it;
        whether the arm runs on the machine's accelerator; the process's own
        memory as measured for this backend. ``lab check``, ``lab run`` and
        the report turn it into bytes from the models' headers
        (:func:`lab.profile.fit.estimate_arm`) and refuse an arm that will not
        fit. Default None: the arm is not estimated."""
        return None

    @classmethod
    def engine_command(cls, arm: Arm, run: RunSettings) -> EngineCommand | None:
        """The engine's own command line for this arm's configuration (its
        model, draft, ``arm.n_max`` and the options a user would type), for
        the report's "What to run": the arm may carry an n_max the run
        predicted rather than measured, and the line follows it. The lab's
        measurement settings (ports, logs, set acceptance) stay out; the
        run's sampling and lengths go in where the tool takes them. An
        ``EngineCommand`` with no ``argv`` says why no tool runs it. Must
        not load a model. Default None: the backend does not say."""
        return None

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
        """The engine's own tool a baseline arm can be held against
        (``[run] reference = true``), as the report names it, or None; a
        backend that names one is :class:`Referencing`."""
        return None

    @classmethod
    def round_state(cls, arm_options: Mapping[str, Any]) -> str:
        """How a cold round meets the engine in the state the first round met
        (:data:`ROUND_STATES`): ``"none"``, it keeps nothing between
        requests; ``"reset"``, :meth:`reset_round` clears it in place;
        ``"restart"``, :meth:`reset_round` restarts the engine, off the
        clock. The runner resets before every measured cell after another
        generation (warm rounds: only before each prompt's round 1)."""
        return "none"

    def reset_round(self, emit: Emit) -> None:
        """Bring the engine back to the state the arm's first cell met (see
        :meth:`round_state`), emitting loading statuses; raises as ``load``."""

    @abstractmethod
    def load(self, emit: Emit) -> None:
        """Load the arm's model, emitting ``loading`` StatusChanged events.
        Raises EngineOOM (it does not fit), EngineCrashed (the process died),
        EngineFailure (any failure that is a result); anything else is a
        load error."""

    @abstractmethod
    def generate(self, request: GenerationRequest, emit: Emit, cancelled: Callable[[], bool]) -> Generation:
        """Generate one cell: emit a TokenEvent as tokens land (their texts
        make the returned text) and a StepEvent per speculative step (``index``
        from 0), poll ``cancelled`` between steps and raise Cancelled when it
        says so. Engine failures raise as from ``load``."""

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
        """Tokens in the loaded target's vocabulary (called after ``load``)."""

    @abstractmethod
    def attach_drafter(self, drafter: Drafter) -> None:
        """Use the loaded ``drafter`` for every following cell (``begin`` per
        cell, ``draft`` per step, its ``memory_bytes`` in ``engine_bytes``)."""


DraftModelFactory = Callable[[Mapping[str, Any], "DrafterContext"], "Drafter"]
"""Builds a drafter that runs a draft model on a backend's engine, from the
drafter's options and context (see :class:`DraftModelHost`)."""


class DraftModelHost(ABC):
    """Capability of a backend whose engine can also run a draft model; the
    runner hands ``draft_model`` to drafters through
    :attr:`DrafterContext.draft_model`."""

    @abstractmethod
    def draft_model(self, options: Mapping[str, Any], ctx: DrafterContext) -> Drafter:
        """An unloaded drafter running ``options["model"]`` on this engine;
        its ``load`` runs where the engine's work runs."""


class Probing(ABC):
    """Capability of a backend that measures verification cost (``lab
    probe``): seconds of one target pass over w tokens, or of a whole step
    for an engine that runs its own loop (:meth:`probe_notes`)."""

    # The ways this backend can measure, the first being the default.
    probe_methods: ClassVar[tuple[str, ...]] = ()
    # the methods that can place a KV depth before the timed passes (``--depths``)
    probe_depth_methods: ClassVar[tuple[str, ...]] = ()
    # whether it times whole requests, so a run's probe sends its cells' lengths
    probe_times_requests: ClassVar[bool] = False

    def probe_needs_load(self, method: str) -> bool:
        """Whether ``method`` runs on the loaded engine (call ``load`` first)
        or on its own (an external tool that loads the model itself)."""
        return True

    @abstractmethod
    def measure_verify_cost(self, widths: Sequence[int], method: str | None = None) -> list[float]:
        """Seconds of one warmed-up target pass per width (widths hold 1),
        each the median of a few passes, by ``method`` (None: the first);
        ValueError for an unknown method, RuntimeError before a needed ``load``."""

    def measure_verify_cost_at_depth(self, widths: Sequence[int], depth: int, method: str | None = None) -> list[float]:
        """:meth:`measure_verify_cost` with ``depth`` tokens in the KV cache,
        for a method in ``probe_depth_methods``; ValueError where the context
        cannot hold ``depth`` plus the widest width."""
        raise NotImplementedError(f"{type(self).__name__} cannot place a KV depth before its timed passes")

    @classmethod
    def probe_refusal(cls, arm_options: Mapping[str, Any]) -> str | None:
        """Why an arm with these options cannot be probed on this backend
        (a run then says so and prices the arm by no probe of its own), or
        None when it can: the default."""
        return None

    def probe_notes(self) -> dict[str, Any]:
        """What the last measurement ran, saved with the probe; ``"prices":
        "steps"`` (:data:`lab.base.probe.PRICES_STEPS`) marks whole steps."""
        return {}


# How a reference tool counts its rate: "decodes" over their own time
# (llama-bench tg), or "tokens" over the generation phase (the lab's tok_per_s).
REFERENCE_COUNTS = ("decodes", "tokens")


class Referencing(ABC):
    """Capability of a backend whose engine times plain decoding with its own
    tool (llama-bench tg, a bare server request), measured once per baseline
    arm after its last cell when ``[run] reference = true``."""

    def reference_needs_load(self) -> bool:
        """Whether the reference runs against the loaded engine (before
        ``close``) or loads the model itself (after ``close``)."""
        return True

    @abstractmethod
    def measure_reference(self, request: GenerationRequest, prompt_tokens: int | None) -> dict[str, Any]:
        """Time plain decoding of ``request`` (its ``max_tokens``) at the
        arm's prompt depth ``prompt_tokens`` with the engine's own tool:
        ``tool``, ``tok_per_s``, ``counts`` (:data:`REFERENCE_COUNTS`),
        ``n_tokens``, ``command`` and ``settings``. A failure raises; the
        run records it in place of the figure."""


class DivergenceExplaining(ABC):
    """Capability of a Drafting backend that tells why a greedy speculative
    output left its baseline (kernels that depend on the batch's width flip
    near ties): after the cell's clocks stop it puts ``cause``
    (:data:`DIVERGENCE_CAUSES`), the first differing ``token`` and its
    figures under ``engine_report["divergence"]``."""

    @abstractmethod
    def divergence_notes(self) -> dict[str, Any]:
        """How a user reproduces the engine's batch variance and gets a
        bit-exact comparison on this backend: ``repro`` (a command) and
        ``bit_exact`` (the setting and its measured cost), shown beside the
        evidence."""


# "engine batch variance": one row and a verify row pick differently;
# "engine non-determinism": one-row decodes do not repeat.
DIVERGENCE_CAUSES = ("engine batch variance", "engine non-determinism", "not established")


class Rehearsing(ABC):
    """Capability of a drafter whose proposals depend on the loop's own
    output (the oracle): before a greedy cell's timed pass the loop runs
    untimed and silent and hands it the output, until it wants no more or
    ``max_rehearsals`` passes ran."""

    max_rehearsals: ClassVar[int] = 4

    @abstractmethod
    def wants_rehearsal(self, prompt_ids: Sequence[int], cell: Cell) -> bool:
        """Whether another untimed pass should run before the timed one."""

    @abstractmethod
    def rehearsed(self, output_ids: Sequence[int]) -> None:
        """The output ids of an untimed pass of this cell."""


@dataclass(frozen=True)
class Draft:
    """Tokens a drafter proposes, with its distribution per token in
    ``probs`` where it has one (else one-hot: exact for n-gram lookup)."""

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
    # baseline token ids of the same stack for (prompt name, round); None before one ran
    reference: Callable[[str, int], Sequence[int] | None]
    log: Callable[[str], None]
    # the DraftModelHost backend's draft-model factory, so a drafter imports no engine
    draft_model: DraftModelFactory | None = None


class Drafter(ABC):
    """Proposes up to k tokens that continue a context: ``begin`` once per
    cell with the prompt ids (prompt time), ``draft`` once per step with the
    whole context so far. A stateful drafter must cope with rollbacks."""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    options: ClassVar[tuple[Option, ...]] = ()
    # Stacks whose targets it can draft for; None means any (token-level drafters).
    stacks: ClassVar[frozenset[str] | None] = None
    # whether it replays a baseline's output (so its arm needs one of the same stack)
    needs_baseline: ClassVar[bool] = False
    # whether it learns across cells: cold rounds call ``forget`` before each
    keeps_state: ClassVar[bool] = False

    def __init__(self, options: Mapping[str, Any], ctx: DrafterContext) -> None:
        # every declared option, the default where the profile set none
        self.opts = with_defaults(self.options, options)
        self.ctx = ctx

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> list[str]:
        """Problems with how the drafter's options go together, as
        :meth:`Backend.check_options`."""
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


# Everything the core reads from a plugin class and its kind (METHOD: callable):
# the registry holds each class to it at load, the one place a class is inspected.
METHOD = "method"
CAPABILITIES: dict[type, dict[str, type | tuple[type, ...] | str]] = {
    Backend: {
        "name": str, "stack": str, "description": str, "options": tuple, "accepts_drafters": bool,
        "sets_acceptance": METHOD, "reference_tool": METHOD,
        "max_overshoot_tokens": int, "gpu_layers_option": (str, type(None)), "needs_model": METHOD, "refuse_options": METHOD,
        "missing_engine": METHOD, "engine_command": METHOD,
        "warn_options": METHOD, "memory_needs": METHOD, "is_speculative": METHOD, "busy_cores": METHOD, "round_state": METHOD,
        "check_options": METHOD, "native_preload": tuple,
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
