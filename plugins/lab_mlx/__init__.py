"""MLX backends: ``mlx`` (baseline and the lab's speculative loop for any
drafter plugin) and ``mlx-dflash`` (DFlash / DFlash 2 block drafts verified
by the target, with the step split into draft and verify).

Registered through the ``lab.backends`` entry-point group. Nothing here
imports mlx until an arm loads."""

from __future__ import annotations

from typing import Callable

from lab.api import Backend
from lab.hookspecs import hookimpl


@hookimpl
def lab_register_backends(register: Callable[[type[Backend]], None]) -> None:
    from lab_mlx.backend import MlxBackend
    from lab_mlx.dflash_backend import MlxDFlashBackend

    register(MlxBackend)
    register(MlxDFlashBackend)
