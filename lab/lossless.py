"""Is a drafter lossless at temperature > 0? Per context and position from 2
on, plain and speculative samples are compared by a chi-square homogeneity
test with a permutation p-value, Holm's correction over all tests (at most
``alpha`` chance of failing a lossless drafter), and the total-variation
distance beside its chance level."""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from statistics import NormalDist
from typing import Any, Mapping, Sequence, TextIO

import numpy as np

from lab.api import Backend, BackendContext, Drafter, Drafting, GenerationRequest, Option
from lab.arms.life import attach_drafter
from lab.base.events import Cell, Event, StepEvent, TokenEvent
from lab.base.profile import Arm, RunSettings
from lab.registry import Registry, load_registry

# Short (every sample repeats the prompt): open-ended, repetitive, in between.
DEFAULT_CONTEXTS: tuple[tuple[str, str], ...] = (
    ("story", "Once upon a time, in a small village by the sea, there lived"),
    ("days", "Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday, Monday, Tuesday,"),
    ("code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"),
)

POWER = 0.8  # the power the quoted smallest detectable distance refers to

# seeds on a grid: a shared seed would draw the same first token on both sides
_SEED_ARM = 1_000_000
_SEED_CONTEXT = 10_000


@dataclass(frozen=True)
class DrafterSpec:
    """A drafter to check and its options (``ngram``, ``draft-model:model=PATH``)."""

    name: str
    options: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> DrafterSpec:
        """``NAME`` or ``NAME:KEY=VALUE,KEY=VALUE``; values stay strings
        until the drafter's declared option types convert them."""
        name, _, rest = text.partition(":")
        options: dict[str, Any] = {}
        for part in filter(None, rest.split(",")):
            key, eq, value = part.partition("=")
            if not eq or not key.strip():
                raise ValueError(f"drafter option {part!r} in {text!r} is not KEY=VALUE")
            options[key.strip()] = value.strip()
        if not name.strip():
            raise ValueError(f"no drafter name in {text!r}")
        return cls(name.strip(), options)

    @property
    def label(self) -> str:
        if not self.options:
            return self.name
        return self.name + ":" + ",".join(f"{k}={v}" for k, v in self.options.items())


@dataclass(frozen=True)
class PositionTest:
    """One (context, position) comparison of baseline and speculative tokens."""

    context: str
    position: int  # 1-based position in the continuation
    distinct: int  # distinct tokens seen there on either side
    tv: float  # total-variation distance of the empirical distributions
    chance_tv: float  # the distance such samples show when nothing differs
    chi2: float
    p: float  # permutation p-value
    p_holm: float  # Holm-adjusted over the whole run's family of tests
    drafted_share: float  # share of speculative samples whose token there was an accepted draft


@dataclass
class DrafterVerdict:
    drafter: str
    lossless: bool | None  # None: inconclusive (nothing was drafted)
    summary: str
    samples: int  # per side and context
    steps: int
    drafted: int
    accepted: int
    seconds: float
    tests: list[PositionTest] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class LosslessReport:
    backend: str
    model: str | None
    temperature: float
    contexts: list[str]
    samples: int
    tokens: int
    n_max: int
    alpha: float
    permutations: int
    min_detectable_tv: float
    baseline_seconds: float
    verdicts: list[DrafterVerdict]

    @property
    def exit_code(self) -> int:
        """0: every drafter lossless; 1: some drafter NOT lossless;
        3: none failed but some drafter drafted nothing (inconclusive)."""
        if any(v.lossless is False for v in self.verdicts):
            return 1
        if any(v.lossless is None for v in self.verdicts):
            return 3
        return 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def tv_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Total-variation distance between the empirical distributions of two
    samples of category ids."""
    _, inverse = np.unique(np.concatenate([a, b]), return_inverse=True)
    k = int(inverse.max()) + 1
    pa = np.bincount(inverse[: len(a)], minlength=k) / len(a)
    pb = np.bincount(inverse[len(a):], minlength=k) / len(b)
    return float(0.5 * np.abs(pa - pb).sum())


def _chi2(counts_a: np.ndarray, totals: np.ndarray, n_a: int, n_b: int) -> np.ndarray:
    """Pearson's chi-square of 2 x K tables given side A's counts (rows of
    ``counts_a``) and the column totals, which permutations leave fixed."""
    n = n_a + n_b
    expected_a = totals * (n_a / n)
    expected_b = totals * (n_b / n)
    counts_b = totals - counts_a
    out: np.ndarray = ((counts_a - expected_a) ** 2 / expected_a + (counts_b - expected_b) ** 2 / expected_b).sum(axis=-1)
    return out


def permutation_test(
    a: np.ndarray, b: np.ndarray, permutations: int, rng: np.random.Generator
) -> tuple[float, float, float]:
    """Chi-square of homogeneity for two samples of category ids, its
    permutation p-value ``(1 + #{perm >= observed}) / (1 + B)``, and the
    mean total-variation distance of the permuted samples (chance's)."""
    a = np.asarray(a)
    b = np.asarray(b)
    n_a, n_b = len(a), len(b)
    _, inverse = np.unique(np.concatenate([a, b]), return_inverse=True)
    k = int(inverse.max()) + 1
    totals = np.bincount(inverse, minlength=k).astype(np.float64)
    observed = float(_chi2(np.bincount(inverse[:n_a], minlength=k).astype(np.float64), totals, n_a, n_b))
    if k == 1:
        return observed, 1.0, 0.0
    shuffled = rng.permuted(np.broadcast_to(inverse, (permutations, n_a + n_b)), axis=1)[:, :n_a]
    flat = (shuffled + (np.arange(permutations) * k)[:, None]).ravel()
    counts = np.bincount(flat, minlength=permutations * k).reshape(permutations, k).astype(np.float64)
    null = _chi2(counts, totals, n_a, n_b)
    # the same table by another permutation is "as extreme" whatever the rounding
    hits = int((null >= observed * (1 - 1e-9) - 1e-12).sum())
    chance_tv = float((0.5 * np.abs(counts / n_a - (totals - counts) / n_b).sum(axis=1)).mean())
    return observed, (1 + hits) / (1 + permutations), chance_tv


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values: reject where adjusted <= alpha
    and the family-wise error rate is at most alpha, for any dependence."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def min_detectable_tv(n_a: int, n_b: int, alpha_per_test: float, power: float = POWER) -> float:
    """About the smallest total-variation distance a test at
    ``alpha_per_test`` finds with probability ``power`` (a two-proportion
    z-test at one half; a difference spread over many tokens needs more)."""
    z = NormalDist().inv_cdf(1 - alpha_per_test / 2) + NormalDist().inv_cdf(power)
    return z * 0.5 * math.sqrt(1 / n_a + 1 / n_b)


def permutations_needed(n_tests: int, alpha: float, requested: int | None) -> int:
    """A permutation p-value cannot go below 1/(B+1); Holm's first threshold
    is alpha / n_tests, so B must leave room under it."""
    floor = math.ceil(4 * n_tests / alpha)
    return max(requested or 0, floor, 1000)


@dataclass
class _ArmSamples:
    tokens: dict[str, np.ndarray]  # context -> (samples, tokens) ids
    from_draft: dict[str, np.ndarray]  # context -> (samples, tokens) bools
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    seconds: float = 0.0


class _Collect:
    """Listens to one generation: which output positions came from drafts,
    and the step totals."""

    def __init__(self) -> None:
        self.origin: list[bool] = []
        self.steps = 0
        self.drafted = 0
        self.accepted = 0

    def __call__(self, event: Event) -> None:
        if isinstance(event, TokenEvent):
            self.origin.extend([event.from_draft] * len(event.ids))
        elif isinstance(event, StepEvent):
            self.steps += 1
            self.drafted += event.drafted
            self.accepted += event.accepted


def _convert(option: Option, value: Any) -> Any:
    if not isinstance(value, str) or option.type is str:
        return value
    if option.type is bool:
        if value.lower() in ("1", "true", "yes", "on"):
            return True
        if value.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"option {option.name}: {value!r} is not a boolean")
    if option.type is list:
        return [part for part in value.split(";") if part]
    return option.type(value)


def _options(declared: Sequence[Option], given: Mapping[str, Any], what: str) -> dict[str, Any]:
    by_name = {o.name: o for o in declared}
    unknown = sorted(set(given) - set(by_name))
    if unknown:
        known = ", ".join(sorted(by_name)) or "none"
        raise ValueError(f"{what}: unknown option(s) {', '.join(unknown)}; it accepts {known}")
    out = {name: _convert(by_name[name], value) for name, value in given.items()}
    missing = [o.name for o in declared if o.required and o.name not in out]
    if missing:
        raise ValueError(f"{what} needs option(s) {', '.join(missing)}, e.g. --drafter {what}:{missing[0]}=...")
    return out


class _Sampler:
    """Loads one arm at a time, like the runner, and draws continuations."""

    def __init__(self, registry: Registry, backend: str, model: str | None, backend_options: Mapping[str, Any],
                 contexts: Sequence[tuple[str, str]], run: RunSettings, n_max: int) -> None:
        self.registry = registry
        self.backend_cls = registry.backend(backend)
        if not issubclass(self.backend_cls, Drafting):
            raise ValueError(f"backend {backend} does not run drafter plugins through the lab's loop")
        self.backend_name = backend
        self.model = model
        self.backend_options = _options(self.backend_cls.options, backend_options, f"backend {backend}")
        self.contexts = contexts
        self.run = run
        self.n_max = n_max
        self.reference: dict[str, list[int]] = {}

    def _arm(self, name: str, drafter: DrafterSpec | None, options: Mapping[str, Any]) -> Arm:
        return Arm(
            name=name, backend=self.backend_name, model=self.model,
            drafter=drafter.name if drafter else None, n_max=self.n_max if drafter else None,
            options=dict(self.backend_options), drafter_options=dict(options),
            baseline=None if drafter is None else "baseline", is_baseline=drafter is None,
            stack=self.backend_cls.stack, group=name,
        )

    def _seed(self, arm_index: int, context_index: int, sample: int) -> int:
        return (self.run.seed * 7919 + arm_index * _SEED_ARM + context_index * _SEED_CONTEXT + sample) & 0x7FFFFFFF

    def drafter_class(self, drafter: DrafterSpec) -> tuple[type[Drafter], dict[str, Any]]:
        """The drafter's class and its options converted to their declared
        types; raises before any engine loads when they do not fit."""
        dcls = self.registry.drafter(drafter.name)
        options = _options(dcls.options, drafter.options, drafter.name)
        if dcls.stacks is not None and self.backend_cls.stack not in dcls.stacks:
            raise ValueError(f"drafter {drafter.name} does not draft for stack {self.backend_cls.stack}")
        return dcls, options

    def sample(self, arm_index: int, drafter: DrafterSpec | None, samples: int) -> _ArmSamples:
        name = drafter.label if drafter else "baseline"
        options: dict[str, Any] = {}
        dcls: type[Drafter] | None = None
        if drafter is not None:
            dcls, options = self.drafter_class(drafter)
        arm = self._arm(name, drafter, options)
        ctx = BackendContext(self.run, "", lambda text: None)
        backend: Backend = self.backend_cls(arm, ctx)
        instance: Drafter | None = None
        t0 = time.perf_counter()
        try:
            backend.load(lambda event: None)
            if dcls is not None:
                assert isinstance(backend, Drafting)
                instance = attach_drafter(dcls, arm, backend, self.run, self._reference, lambda text: None,
                                          seed=self._seed(arm_index, 99, 0))
            else:
                # the oracle replays a continuation drawn with a seed no compared sample uses
                for ci, (cname, text) in enumerate(self.contexts):
                    ids, _ = self._generate(backend, arm.name, cname, text, 0, self._seed(arm_index, ci, _SEED_CONTEXT - 1), None)
                    self.reference[cname] = ids
            out = _ArmSamples({}, {})
            for ci, (cname, text) in enumerate(self.contexts):
                rows = np.zeros((samples, self.run.max_tokens), dtype=np.int64)
                drafted_rows = np.zeros((samples, self.run.max_tokens), dtype=bool)
                for j in range(samples):
                    collect = _Collect()
                    ids, origin = self._generate(backend, arm.name, cname, text, j + 1, self._seed(arm_index, ci, j), collect)
                    rows[j] = ids
                    drafted_rows[j] = origin
                    out.steps += collect.steps
                    out.drafted += collect.drafted
                    out.accepted += collect.accepted
                out.tokens[cname] = rows
                out.from_draft[cname] = drafted_rows
            out.seconds = time.perf_counter() - t0
            return out
        finally:
            if instance is not None:
                instance.close()
            backend.close()

    def _reference(self, prompt: str, round: int) -> Sequence[int] | None:
        return self.reference.get(prompt)

    def _generate(self, backend: Backend, arm: str, cname: str, text: str, round: int, seed: int,
                  collect: _Collect | None) -> tuple[list[int], list[bool]]:
        run = self.run
        request = GenerationRequest(
            cell=Cell(arm, cname, round), prompt=text, system=None, chat_template=False,
            max_tokens=run.max_tokens, temperature=run.temperature, seed=seed, ignore_eos=True,
            n_max=backend.arm.n_max,
        )
        listen = collect if collect is not None else _Collect()
        gen = backend.generate(request, listen, lambda: False)
        if len(gen.ids) != run.max_tokens:
            raise RuntimeError(f"{arm} gave {len(gen.ids)} tokens for context {cname!r}, not {run.max_tokens}: "
                               "the check needs a backend that honours ignore_eos")
        origin = listen.origin if len(listen.origin) == len(gen.ids) else [False] * len(gen.ids)
        return list(gen.ids), origin


def run_lossless_check(
    drafters: Sequence[DrafterSpec | str],
    *,
    backend: str = "llamacpp",
    model: str | None = "embedded:smollm2",
    backend_options: Mapping[str, Any] | None = None,
    contexts: Sequence[tuple[str, str]] = DEFAULT_CONTEXTS,
    temperature: float = 0.8,
    samples: int = 100,
    tokens: int = 5,
    n_max: int = 4,
    alpha: float = 0.01,
    permutations: int | None = None,
    seed: int = 0,
    threads: int = 0,
    registry: Registry | None = None,
    out: TextIO | None = None,
) -> LosslessReport:
    """Sample the baseline and each drafter's loop on one backend, test each
    context and position, print the verdicts to ``out`` and return them."""
    out = out if out is not None else sys.stdout
    registry = registry if registry is not None else load_registry()
    specs = [DrafterSpec.parse(d) if isinstance(d, str) else d for d in drafters]
    if not specs:
        raise ValueError("name at least one drafter to check")
    if not 2 <= tokens:
        raise ValueError("tokens must be at least 2: position 1 is sampled before any drafter runs")
    if not 10 <= samples < _SEED_CONTEXT - 1:
        raise ValueError(f"samples must be within [10, {_SEED_CONTEXT - 2}]")
    if not contexts or len(contexts) >= 99:
        raise ValueError("give between 1 and 98 contexts")
    if len({c for c, _ in contexts}) != len(contexts):
        raise ValueError("context names must be unique")
    if not 0 < alpha < 1:
        raise ValueError("alpha must be within (0, 1)")
    if temperature <= 0:
        out.write("note: at temperature 0 both loops are deterministic; `lab run` checks greedy equivalence\n")

    positions = list(range(2, tokens + 1))
    n_tests = len(specs) * len(contexts) * len(positions)
    permutations = permutations_needed(n_tests, alpha, permutations)
    detectable = min_detectable_tv(samples, samples, alpha / n_tests)
    run = RunSettings(max_tokens=tokens, temperature=temperature, seed=seed, rounds=1, warmup=0,
                      chat_template=False, ignore_eos=True, n_ctx=512, threads=threads)
    sampler = _Sampler(registry, backend, model, backend_options or {}, contexts, run, n_max)
    for spec in specs:
        sampler.drafter_class(spec)

    out.write(
        f"lossless check on {backend} {model or ''}: temperature {temperature:g}, {len(contexts)} contexts "
        f"({', '.join(c for c, _ in contexts)}) x {samples} samples x {tokens} tokens per side, n_max {n_max}\n"
        f"test: chi-square of homogeneity per context and position 2..{tokens}, p by {permutations} permutations, "
        f"Holm over {n_tests} tests, alpha {alpha:g}\n"
    )
    out.flush()
    base = sampler.sample(0, None, samples)
    out.write(f"baseline: {samples * len(contexts)} continuations in {base.seconds:.1f} s\n")
    out.flush()

    rng = np.random.default_rng(seed)
    arms: list[tuple[DrafterSpec, _ArmSamples, list[PositionTest]]] = []
    for index, spec in enumerate(specs, start=1):
        spec_samples = sampler.sample(index, spec, samples)
        tests = []
        for cname, _ in contexts:
            for pos in positions:
                a = base.tokens[cname][:, pos - 1]
                b = spec_samples.tokens[cname][:, pos - 1]
                chi2, p, chance_tv = permutation_test(a, b, permutations, rng)
                tests.append(PositionTest(
                    context=cname, position=pos, distinct=len(np.unique(np.concatenate([a, b]))),
                    tv=tv_distance(a, b), chance_tv=chance_tv, chi2=chi2, p=p, p_holm=1.0,
                    drafted_share=float(spec_samples.from_draft[cname][:, pos - 1].mean()),
                ))
        arms.append((spec, spec_samples, tests))
        out.write(f"{spec.label}: {samples * len(contexts)} continuations in {spec_samples.seconds:.1f} s\n")
        out.flush()

    adjusted = iter(holm([t.p for _, _, tests in arms for t in tests]))
    verdicts = []
    for spec, s, tests in arms:
        tests = [replace(t, p_holm=next(adjusted)) for t in tests]
        verdicts.append(_verdict(spec, s, tests, samples, alpha, detectable))

    report = LosslessReport(
        backend=backend, model=model, temperature=temperature, contexts=[c for c, _ in contexts],
        samples=samples, tokens=tokens, n_max=n_max, alpha=alpha, permutations=permutations,
        min_detectable_tv=detectable, baseline_seconds=base.seconds, verdicts=verdicts,
    )
    out.write(format_report(report))
    out.flush()
    return report


def _verdict(spec: DrafterSpec, s: _ArmSamples, tests: list[PositionTest], samples: int, alpha: float,
             detectable: float) -> DrafterVerdict:
    notes = []
    failed = [t for t in tests if t.p_holm <= alpha]
    rejected = s.drafted - s.accepted
    if s.drafted and not rejected:
        notes.append("no drafted token was rejected: the rejection and residual sampling path went untested")
    if s.drafted and not s.accepted:
        notes.append("no drafted token was accepted: the acceptance path went untested")
    if failed:
        worst = min(failed, key=lambda t: (t.p_holm, -t.tv))
        where = ", ".join(f"{t.context}:{t.position}" for t in failed)
        summary = (f"NOT lossless: position {worst.position} of context {worst.context!r} differs "
                   f"(TV {worst.tv:.3f}, p {worst.p:.2g}, Holm p {worst.p_holm:.2g}); differing: {where}")
        lossless: bool | None = False
    elif not s.drafted:
        summary = "inconclusive: the drafter drafted nothing in these contexts, so no draft was ever verified"
        lossless = None
    else:
        p_min = min(t.p_holm for t in tests)
        summary = (f"lossless: no evidence of a difference (p={p_min:.2g}, n={samples} per side and context, "
                   f"the smallest TV distance this n can detect ≈ {detectable:.2f})")
        lossless = True
    return DrafterVerdict(
        drafter=spec.label, lossless=lossless, summary=summary, samples=samples, steps=s.steps,
        drafted=s.drafted, accepted=s.accepted, seconds=s.seconds, tests=tests, notes=notes,
    )


def format_report(report: LosslessReport) -> str:
    lines = []
    for v in report.verdicts:
        rate = f"{v.accepted / v.drafted:.0%}" if v.drafted else "-"
        lines.append("")
        lines.append(f"drafter {v.drafter}: {v.steps} steps, {v.drafted} drafted, {v.accepted} accepted ({rate})")
        lines.append(f"  {'context':<10} {'pos':>3} {'distinct':>8} {'drafted':>7} {'TV':>6} {'chance':>6} {'chi2':>8} {'p':>8} {'Holm p':>8}")
        for t in v.tests:
            flag = "  <- differs" if t.p_holm <= report.alpha else ""
            lines.append(
                f"  {t.context:<10} {t.position:>3} {t.distinct:>8} {t.drafted_share:>7.0%} {t.tv:>6.3f} {t.chance_tv:>6.3f} "
                f"{t.chi2:>8.1f} {t.p:>8.2g} {t.p_holm:>8.2g}{flag}"
            )
        for note in v.notes:
            lines.append(f"  note: {note}")
        lines.append(f"  {v.drafter}: {v.summary}")
    return "\n".join(lines) + "\n"


def default_drafters(registry: Registry, backend: str) -> list[DrafterSpec]:
    """Installed drafters that need no option and draft for the backend's stack."""
    stack = registry.backend(backend).stack
    return [
        DrafterSpec(name) for name, cls in sorted(registry.drafters.items())
        if not any(o.required for o in cls.options) and (cls.stacks is None or stack in cls.stacks)
    ]
