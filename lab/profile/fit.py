"""Whether each arm fits in memory where it will run, known before it loads.

:func:`estimate_arm` asks the arm's backend what its engine holds
(``Backend.memory_needs``), reads each model's shape from its files' headers
(:mod:`lab.kit.model_shape`) and prices it (:mod:`lab.base.footprint`).
:func:`check_fit` holds every arm of a profile to the budget where it runs
(:mod:`lab.telemetry.budget`) and, for an arm that does not fit, computes what
would: the largest context, the largest n_max, a 4-bit draft. ``lab check``
and ``lab run`` refuse such an arm (``lab run --force`` tries anyway); the
report sets the estimate beside the measured peak."""

from __future__ import annotations

import dataclasses
import functools
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping

from lab.base.footprint import (
    LLAMA_CELL_PAD,
    MLX,
    REPACKED_TYPES,
    VLLM,
    ArmEstimate,
    MemoryNeeds,
    ModelShape,
    Where,
    at_lengths,
    estimate,
    size_text,
    with_process_measured,
)
from lab.base.profile import Arm, Profile, RunSettings
from lab.kit import models
from lab.kit.model_files import ModelFileError
from lab.kit.model_shape import ShapeUnknown, read_shape
from lab.telemetry.budget import Budget, accelerator, read_budget

if TYPE_CHECKING:
    from lab.registry import Registry

# What the accelerator's runtime holds on the device beside the buffers an
# engine logs: a CUDA context with its libraries' workspaces and memory pool
# (an H100's per-process memory less llama.cpp's logged buffers: 595 MiB for
# the 8B in process, 716 MiB for the 27B on llama-server); Metal's is not counted.
RUNTIME_BYTES: dict[str, int] = {"cuda": 640 << 20, "metal": 0, "cpu": 0}
# a 4-bit GGUF draft (Q4_K_M) keeps about this many bits a weight
FOUR_BIT_BPW = 4.85
# the smallest context "what would fit" offers
MIN_CTX = 512
# arm options that set a context of their own over [run] n_ctx (llama-server's -c, vLLM's --max-model-len)
CONTEXT_OPTIONS = ("ctx_size", "max_model_len")


@functools.lru_cache(maxsize=1)
def this_accelerator() -> Where:
    return accelerator()


def repacked_types() -> frozenset[int]:
    machine = platform.machine().lower()
    return REPACKED_TYPES.get("arm64" if machine in ("arm64", "aarch64") else machine, frozenset())


def model_shape(ref: str, build: bool = False) -> ModelShape | str:
    """The shape of the model ``ref`` names, or why it is not known here
    (a built-in model not built yet, a file whose headers do not tell)."""
    try:
        path: Path | None = models.resolve(ref) if build else models.built(ref)
    except (OSError, ValueError) as exc:
        return f"model {ref!r}: {exc}"
    if path is None:
        return f"model {ref!r} is not built yet (its size is known once a run has built it)"
    try:
        return read_shape(path)
    except (ShapeUnknown, ModelFileError, OSError, ValueError) as exc:
        return f"model {ref!r}: its headers do not give its size ({exc})"


def explain_arm(arm: Arm, run: RunSettings, registry: Registry, where: Where | None = None,
                build: bool = False, needs: MemoryNeeds | None = None,
                shapes: Mapping[str, ModelShape] | None = None) -> ArmEstimate | str:
    """The arm's estimate, or why there is none. ``where``: the machine's
    accelerator for an arm that asks for one (None: this machine's);
    ``build``: build a built-in model the estimate needs."""
    if needs is None:
        needs = registry.backend(arm.backend).memory_needs(arm, run)
    if needs is None:
        return f"backend {arm.backend} does not say what this arm holds"
    found: dict[str, ModelShape] = dict(shapes or {})
    for load in needs.models:
        if load.ref in found:
            continue
        got = model_shape(load.ref, build)
        if isinstance(got, str):
            return got
        found[load.ref] = got
    place: Where = "cpu"
    if needs.accelerated:
        place = where if where is not None else this_accelerator()
    total = None
    if needs.budget_share is not None:
        budget = read_budget(place)
        total = budget.total if budget is not None else None
    return estimate(arm.name, needs, found, place, device_total=total, runtime_bytes=RUNTIME_BYTES[place],
                    repacked_types=repacked_types())


def estimate_for_cell(arm: Arm, run: RunSettings, registry: Registry, prompt_tokens: int, generated: int,
                      where: Where | None = None, process_before_load: int | None = None) -> ArmEstimate | str:
    """The arm's estimate at one cell's lengths (what its measured peak is
    held to): :func:`lab.base.footprint.at_lengths`; its process as the run
    measured it before loading where it did
    (:func:`lab.base.footprint.with_process_measured`)."""
    needs = registry.backend(arm.backend).memory_needs(arm, run)
    if needs is None:
        return f"backend {arm.backend} does not say what this arm holds"
    needs = with_process_measured(at_lengths(needs, prompt_tokens, generated), process_before_load)
    return explain_arm(arm, run, registry, where, needs=needs)


def estimate_arm(arm: Arm, run_settings: RunSettings, registry: Registry, where: Where | None = None) -> ArmEstimate | None:
    """An arm's expected resident memory where it runs, part by part (total
    bytes, where: cpu / cuda / metal), from its backend's needs and its
    models' headers; None where the backend does not say or a model is not
    there to read (built-in models are not built here)."""
    got = explain_arm(arm, run_settings, registry, where)
    return got if isinstance(got, ArmEstimate) else None


# -- holding a profile to the budget ---------------------------------------------


@dataclass(frozen=True)
class ArmFit:
    """One arm against the budget where it runs."""

    arm: Arm
    estimate: ArmEstimate | None
    why_not: str = ""  # why there is no estimate
    budget: Budget | None = None
    would_fit: tuple[str, ...] = ()  # settings that would fit, computed

    @property
    def fits(self) -> bool | None:
        """False: it will not fit; None: not known (no estimate or no budget)."""
        if self.estimate is None or self.budget is None:
            return None
        return self.estimate.total <= self.budget.bytes

    def lines(self) -> list[str]:
        """The arm's expected total against its budget, then its parts."""
        e = self.estimate
        if e is None:
            return [f"{self.arm.name}: not estimated: {self.why_not}"]
        verdict = {True: "fits", False: "DOES NOT FIT", None: "no budget read"}[self.fits]
        against = f" of {size_text(self.budget.bytes)} ({self.budget.source})" if self.budget is not None else ""
        taken = ", taken whatever the model" if e.taken is not None else ""
        shown = sorted(e.counted, key=lambda p: -p.bytes)
        parts = ", ".join(f"{p.name} {size_text(p.bytes)}" for p in shown if p.bytes >= 1 << 20)
        small = sum(p.bytes for p in shown if p.bytes < 1 << 20)
        parts += f", the rest {size_text(small)}" if small >= 1 << 19 else ""
        return [f"{self.arm.name} ({e.where}): {size_text(e.total)}{against}{taken}: {verdict}", f"  {parts}"]

    def refusal(self) -> str:
        """The numbers and what would fit, for an arm that does not fit."""
        assert self.estimate is not None and self.budget is not None
        over = self.estimate.total - self.budget.bytes
        parts = ", ".join(f"{p.name} {size_text(p.bytes)}" for p in sorted(self.estimate.counted, key=lambda p: -p.bytes)
                          if p.bytes >= 1 << 20)
        lines = [f"arm {self.arm.name} will not fit: it needs {size_text(self.estimate.total)} on {self.estimate.where} "
                 f"({parts}), {size_text(over)} more than the {size_text(self.budget.bytes)} there "
                 f"({self.budget.source})"]
        if self.would_fit:
            lines += [f"  would fit: {w}" for w in self.would_fit]
        else:
            lines.append("  nothing the profile sets would make it fit here (its weights alone take "
                         f"{size_text(sum(p.bytes for p in self.estimate.counted if 'weights' in p.name))})")
        return "\n".join(lines)


def check_fit(profile: Profile, registry: Registry, budget_of: Callable[[Where], Budget | None] = read_budget,
              where: Where | None = None, build: bool = False) -> list[ArmFit]:
    """Every arm's estimate against its place's budget, in profile order,
    with what would fit for each arm that does not."""
    budgets: dict[Where, Budget | None] = {}
    out = []
    for arm in profile.arms:
        got = explain_arm(arm, profile.run, registry, where, build)
        if isinstance(got, str):
            out.append(ArmFit(arm, None, got))
            continue
        if got.where not in budgets:
            budgets[got.where] = budget_of(got.where)
        budget = budgets[got.where]
        fit = ArmFit(arm, got, budget=budget)
        if fit.fits is False and budget is not None:
            fit = dataclasses.replace(fit, would_fit=tuple(what_would_fit(arm, profile.run, registry, got, budget,
                                                                          where)))
        out.append(fit)
    return out


def what_would_fit(arm: Arm, run: RunSettings, registry: Registry, est: ArmEstimate, budget: Budget,
                   where: Where | None = None) -> list[str]:
    """Settings that bring the arm under ``budget``, each computed by
    estimating the arm again with it: a smaller context, a smaller n_max, a
    4-bit draft."""
    backend = registry.backend(arm.backend)
    needs = backend.memory_needs(arm, run)
    if needs is None:
        return []
    shapes = {load.ref: s for load in needs.models if isinstance(s := model_shape(load.ref), ModelShape)}
    place = est.where

    def total(n: MemoryNeeds, s: Mapping[str, ModelShape] | None = None) -> int | None:
        got = explain_arm(arm, run, registry, place if n.accelerated else where, needs=n, shapes=s or shapes)
        return got.total if isinstance(got, ArmEstimate) else None

    out = []
    own = [k for k in CONTEXT_OPTIONS if arm.options.get(k)]
    bare = dataclasses.replace(arm, options={k: v for k, v in arm.options.items() if k not in CONTEXT_OPTIONS},
                               drafter_options={k: v for k, v in arm.drafter_options.items() if k != "n_ctx"})

    def at_context(n_ctx: int) -> int | None:
        n = backend.memory_needs(bare, dataclasses.replace(run, n_ctx=n_ctx))
        return total(n) if n is not None else None

    top = max([int(arm.options[k]) for k in own] + [run.n_ctx])
    ctx = _largest_context(top, budget.bytes, at_context)
    if ctx is not None:
        instead = f" (instead of the arm's {', '.join(own)})" if own else ""
        out.append(f"[run] n_ctx = {ctx}{instead}: {size_text(at_context(ctx))}")
    if arm.n_max and arm.n_max > 1:
        for k in range(arm.n_max - 1, 0, -1):
            smaller = backend.memory_needs(dataclasses.replace(arm, n_max=k), run)
            got = total(smaller) if smaller is not None else None
            if got is not None and got <= budget.bytes:
                out.append(f"n_max = {k} (the widest that fits): {size_text(got)}")
                break
    out += _four_bit_drafts(needs, shapes, budget.bytes, total)
    return out


def _largest_context(top: int, budget: int, total: Callable[[int], int | None]) -> int | None:
    """The largest context (a multiple of 256, at least MIN_CTX, below
    ``top``) whose estimate fits, by bisection; None if none does."""
    lo, hi = MIN_CTX // LLAMA_CELL_PAD, (top - 1) // LLAMA_CELL_PAD
    if hi < lo:
        return None
    got = total(lo * LLAMA_CELL_PAD)
    if got is None or got > budget:
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        got = total(mid * LLAMA_CELL_PAD)
        if got is not None and got <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo * LLAMA_CELL_PAD


def _four_bit_drafts(needs: MemoryNeeds, shapes: Mapping[str, ModelShape], budget: int,
                     total: Callable[[MemoryNeeds, Mapping[str, ModelShape] | None], int | None]) -> list[str]:
    """For each draft stored wider than 4 bits: the arm with it at 4 bits,
    where that fits (MLX quantizes at load; a GGUF draft needs a 4-bit file)."""
    out = []
    for i, load in enumerate(needs.models):
        shape = shapes.get(load.ref)
        if load.role == "target" or load.shares_weights or shape is None:
            continue
        if needs.engine == MLX:
            if load.weight_bits and load.weight_bits <= 4:
                continue
            models_ = list(needs.models)
            models_[i] = dataclasses.replace(load, weight_bits=4)
            got = total(dataclasses.replace(needs, models=tuple(models_)), None)
            if got is not None and got <= budget:
                out.append(f"the {load.role} quantized to 4 bits at load (draft_bits = 4): {size_text(got)}")
            continue
        if needs.engine == VLLM or not shape.weight_elems:
            continue
        bpw = shape.weight_bytes * 8 / shape.weight_elems
        if bpw <= FOUR_BIT_BPW + 0.5:
            continue
        smaller = dataclasses.replace(shape, weight_bytes=int(shape.weight_elems * FOUR_BIT_BPW / 8),
                                      matrix_types=())
        got = total(needs, {**shapes, load.ref: smaller})
        if got is not None and got <= budget:
            out.append(f"a 4-bit {load.role} (Q4_K_M, about {size_text(smaller.weight_bytes)} instead of "
                       f"{size_text(shape.weight_bytes)} at {bpw:.1f} bits a weight): {size_text(got)}")
    return out
