"""The ``mlx-lm`` backend: mlx-lm's own generation, plain or with its
speculative decoding and an MLX draft model, as a Mac user runs it.

Registered through the ``lab.backends`` entry-point group; nothing here
imports mlx until an arm loads."""

from __future__ import annotations

from typing import Callable

from lab.api import Backend
from lab.hookspecs import hookimpl


@hookimpl
def lab_register_backends(register: Callable[[type[Backend]], None]) -> None:
    from lab_mlx_lm.backend import MlxLmBackend

    register(MlxLmBackend)

