"""Which of a group's engines stay loaded between their cells.

Paired cells want every engine of a group loaded at once, so that an arm's
cell follows its baseline's without a load between them. Where the group's
engines would not fit together (their expected memory against what the
machine has free where they run), the baseline stays loaded and each other
arm loads before its cell and closes after it, off the clock; where not even
that fits, every cell loads its own engine. The report says which."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from lab.base.profile import Arm, Profile

if TYPE_CHECKING:
    from lab.registry import Registry

# what an engine takes beyond its weights at the least (runtime, buffers, a small KV cache)
_FLOOR_BYTES = 256 << 20
# weights plus KV cache and compute buffers, for an arm no finer estimate covers
_OVER_WEIGHTS = 1.25
# share of the free memory a plan may fill: the rest is the machine's
_HEADROOM = 0.85


@dataclass(frozen=True)
class Residency:
    """The arms that stay loaded between their cells, and why."""

    resident: frozenset[str]
    note: str


def expected_bytes(arm: Arm, profile: Profile, registry: Registry) -> int | None:
    """An arm's expected resident memory, None where it cannot be told
    without loading (a model not on disk yet)."""
    from lab.kit import models

    total = 0
    refs = [arm.model] if arm.model else []
    bcls = registry.backends.get(arm.backend)
    dcls = registry.drafters.get(arm.drafter) if arm.drafter else None
    for cls, given in ((bcls, arm.options), (dcls, arm.drafter_options)):
        for option in cls.options if cls is not None else ():
            if option.model_ref and isinstance(given.get(option.name), str):
                refs.append(given[option.name])
    for ref in refs:
        path = models.cached(ref)
        if path is None:
            return None
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else path.stat().st_size
        total += int(size * _OVER_WEIGHTS)
    return total + _FLOOR_BYTES


def free_bytes(on_gpu: bool) -> int | None:
    """Memory free now where the arms run: the card's (NVML or nvidia-smi)
    or the machine's available RAM."""
    if on_gpu:
        from lab.telemetry.gpu import open_reader

        reader = open_reader()
        if reader is None:
            return None
        try:
            got = reader.read()
        finally:
            reader.close()
        return min((s.memory_total_bytes - s.memory_used_bytes for s in got), default=None)
    import psutil

    return int(psutil.virtual_memory().available)


def residency(group: Sequence[Arm], profile: Profile, registry: Registry) -> Residency:
    names = frozenset(a.name for a in group)
    if profile.run.order == "arms" or len(group) < 2:
        return Residency(names, "")
    sizes = {a.name: expected_bytes(a, profile, registry) for a in group}
    on_gpu = any(_offloads(a, registry) for a in group)
    free = free_bytes(on_gpu)
    where = "on the GPU" if on_gpu else "in RAM"
    if free is None or any(v is None for v in sizes.values()):
        return Residency(names, "all loaded at once (their size could not be told before loading)")
    budget = int(free * _HEADROOM)
    total = sum(v or 0 for v in sizes.values())
    if total <= budget:
        return Residency(names, f"all loaded at once ({fmt_bytes(total)} expected, {fmt_bytes(free)} free {where})")
    base = [a for a in group if a.is_baseline or a.baseline is None]
    biggest = max((sizes[a.name] or 0) for a in group if a not in base)
    kept = sum(sizes[a.name] or 0 for a in base)
    if kept + biggest <= budget:
        return Residency(frozenset(a.name for a in base),
                         f"the baseline kept loaded, each other arm loaded for its cell and closed after, off the clock "
                         f"(all together: {fmt_bytes(total)} expected, {fmt_bytes(free)} free {where})")
    return Residency(frozenset(), f"each cell loads its own engine, off the clock (a baseline beside the largest arm: "
                                  f"{fmt_bytes(kept + biggest)} expected, {fmt_bytes(free)} free {where})")


def fmt_bytes(count: int) -> str:
    return f"{count / 1e9:.1f} GB"


def _offloads(arm: Arm, registry: Registry) -> bool:
    cls = registry.backends.get(arm.backend)
    option = cls.gpu_layers_option if cls is not None else None
    return bool(option and int(arm.options.get(option) or 0))
