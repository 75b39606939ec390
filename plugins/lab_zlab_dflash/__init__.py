"""The ``zlab-dflash`` backend: z-lab's ``dflash`` package (``dflash mlx``)
through its Python API; nothing here imports mlx or dflash."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from lab.api import Backend
from lab.hookspecs import hookimpl

if TYPE_CHECKING:
    from lab.api import Check


@hookimpl
def lab_register_backends(register: Callable[[type[Backend]], None]) -> None:
    from lab_zlab_dflash.backend import ZlabDFlashBackend

    register(ZlabDFlashBackend)


@hookimpl
def lab_doctor_checks(register: Callable[[Check], None]) -> None:
    from lab.kit.checks import package_check
    from lab_zlab_dflash.backend import INSTALL

    register(package_check("dflash", "dflash", INSTALL))
