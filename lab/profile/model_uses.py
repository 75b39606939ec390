"""Every model a checked profile's arms load: the arm's ``model`` and each
option its backend or drafter marks ``model_ref`` (``draft_model``, MLX's
``draft``), in the profile's order, for the commands that look them up
(``lab fetch``, ``lab check``, ``lab run``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from lab.base.profile import Profile

if TYPE_CHECKING:
    from lab.registry import Registry


@dataclass(frozen=True)
class ModelUse:
    """One model one arm loads: ``key`` is where the profile names it
    (``model``, ``options.draft_model``, ``drafter_options.model``)."""

    arm: str
    backend: str
    key: str
    ref: str


def model_uses(profile: Profile, registry: Registry) -> list[ModelUse]:
    out: list[ModelUse] = []
    for arm in profile.arms:
        if arm.model is not None:
            out.append(ModelUse(arm.name, arm.backend, "model", arm.model))
        tables = [("options", arm.options, registry.backend(arm.backend).options)]
        if arm.drafter is not None:
            tables.append(("drafter_options", arm.drafter_options, registry.drafter(arm.drafter).options))
        for table, values, declared in tables:
            refs = {o.name for o in declared if o.model_ref}
            for name, value in values.items():
                if name in refs and isinstance(value, str):
                    out.append(ModelUse(arm.name, arm.backend, f"{table}.{name}", value))
    return out
