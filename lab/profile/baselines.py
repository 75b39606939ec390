"""Which arm each speculative arm is measured against: the first baseline
(an arm that does not draft) of the same stack and model, unless it names
one; named references must exist and form no cycle, and a drafter with
``needs_baseline`` must have one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

from lab.base.profile import Arm
from lab.profile.errors import Source, clean, shown
from lab.profile.read import closest
from lab.profile.sweeps import ArmDraft

if TYPE_CHECKING:
    from lab.registry import Registry


def infer_baselines(src: Source, drafts: Sequence[ArmDraft], registry: Registry | None) -> tuple[Arm, ...]:
    speculative = {d.name: _speculative(src, d, registry) for d in drafts}
    named = _named_baselines(src, drafts)
    # A baseline arm: drafts nothing and is not itself compared to another.
    bases = [d for d in drafts if not speculative[d.name] and d.name not in named]
    arms: list[Arm] = []
    for d in drafts:
        base = named.get(d.name)
        if base is None and speculative[d.name]:
            base = next((b.name for b in bases if b.stack == d.stack and b.model == d.model and _same_setting(b, d)), None)
        if base is None and d.drafter is not None and registry is not None:
            if registry.drafter(d.drafter).needs_baseline:
                raise src.error(
                    ["arms", d.index, "drafter"],
                    f"drafter {d.drafter} replays its stack's baseline: add a baseline arm with the same backend "
                    f"stack ({d.stack}) and model, or name one with baseline = \"...\"",
                )
        arms.append(
            Arm(
                name=d.name, backend=d.backend, model=d.model, drafter=d.drafter, n_max=d.n_max,
                options=d.options, drafter_options=d.drafter_options, baseline=base,
                is_baseline=d.name not in named and not speculative[d.name],
                stack=d.stack, group=d.group, sweep=d.sweep, acceptance=d.acceptance, draft_policy=d.draft_policy,
                deadlines=d.deadlines,
            )
        )
    return tuple(arms)


def _same_setting(base: ArmDraft, arm: ArmDraft) -> bool:
    """A server arm pairs with a baseline of the same concurrency, attached
    with attached and started with started."""
    same_load = int(base.options.get("concurrency") or 1) == int(arm.options.get("concurrency") or 1)
    return same_load and bool(base.options.get("url")) == bool(arm.options.get("url"))


def _speculative(src: Source, d: ArmDraft, registry: Registry | None) -> bool:
    if registry is None:
        return d.drafter is not None
    try:
        return bool(registry.backend(d.backend).is_speculative(d.options, d.drafter))
    except Exception as exc:  # noqa: BLE001 - a plugin's bug is reported, not raised
        raise src.error(
            ["arms", d.index, "backend"], f"backend {d.backend!r} failed to classify the arm: {type(exc).__name__}: {clean(str(exc))[:200]}"
        ) from None


def _named_baselines(src: Source, drafts: Sequence[ArmDraft]) -> dict[str, str]:
    """Arm name -> the baseline it names, checked to exist and to end in an
    arm that names none."""
    names = [d.name for d in drafts]
    named: dict[str, str] = {}
    for d in drafts:
        if d.baseline is None:
            continue
        key: list[str | int] = ["arms", d.index, "baseline"]
        if d.baseline == d.name:
            raise src.error(key, f"arm {shown(d.name)} names itself as its baseline")
        if d.baseline not in names:
            hint = closest(d.baseline, names)
            also = f"; did you mean {hint!r}?" if hint else ""
            if any(x.group == d.baseline and x.sweep for x in drafts):
                also = f"; {shown(d.baseline)} is a sweep: name one of its arms ({', '.join(x.name for x in drafts if x.group == d.baseline)})"
            raise src.error(key, f"no arm named {shown(d.baseline)}{also}")
        named[d.name] = d.baseline
    _refuse_cycles(src, drafts, named)
    return named


def _refuse_cycles(src: Source, drafts: Sequence[ArmDraft], named: Mapping[str, str]) -> None:
    index = {d.name: d.index for d in drafts}
    done: set[str] = set()
    for start in named:
        chain: list[str] = []
        at: str | None = start
        while at is not None and at not in done:
            if at in chain:
                loop = chain[chain.index(at):] + [at]
                raise src.error(["arms", index[at], "baseline"], f"baselines form a cycle: {' -> '.join(loop)}")
            chain.append(at)
            at = named.get(at)
        done.update(chain)
