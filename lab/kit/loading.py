"""The load phases every in-process backend reports before its engine's own."""

from __future__ import annotations

from pathlib import Path

from lab.base.events import Emit, Status, StatusChanged, arm_cell
from lab.base.profile import Arm
from lab.kit import models


def resolve_target(arm: Arm, backend: str, emit: Emit) -> Path:
    """The arm's model as a file, with the "resolving model" and "loading
    target" phases emitted around it; a ValueError when the arm names none."""
    if arm.model is None:
        raise ValueError(f"arm {arm.name}: the {backend} backend needs model = ...")
    cell = arm_cell(arm.name)
    emit(StatusChanged(cell, Status.LOADING, phase="resolving model"))
    path = models.resolve(arm.model)
    emit(StatusChanged(cell, Status.LOADING, phase="loading target", progress=0.3))
    return path
