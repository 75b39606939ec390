"""The ``dflash-mlx`` backend: the ``dflash-mlx`` package's DFlash engine,
as its ``dflash generate`` runs it; nothing here imports mlx or dflash_mlx."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from lab.api import Backend
from lab.hookspecs import hookimpl

if TYPE_CHECKING:
    from lab.api import Check


@hookimpl
def lab_register_backends(register: Callable[[type[Backend]], None]) -> None:
    from lab_dflash_mlx.backend import DFlashMlxBackend

    register(DFlashMlxBackend)


@hookimpl
def lab_doctor_checks(register: Callable[[Check], None]) -> None:
    from lab.kit.checks import package_check
    from lab_dflash_mlx.backend import INSTALL

    register(package_check("dflash-mlx", "dflash_mlx", INSTALL))
