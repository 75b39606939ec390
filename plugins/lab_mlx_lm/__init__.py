"""The ``mlx-lm`` backend: mlx-lm's own generation, plain or speculative;
nothing here imports mlx."""

from __future__ import annotations

from typing import Callable

from lab.api import Backend
from lab.hookspecs import hookimpl


@hookimpl
def lab_register_backends(register: Callable[[type[Backend]], None]) -> None:
    from lab_mlx_lm.backend import MlxLmBackend

    register(MlxLmBackend)

