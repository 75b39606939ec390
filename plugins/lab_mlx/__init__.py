"""MLX backends: ``mlx`` (baseline and the lab's speculative loop for any
drafter plugin) and ``mlx-dflash`` (DFlash / DFlash 2 block drafts verified
by the target, with the step split into draft and verify).

Nothing here imports mlx until an arm loads."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from lab.api import Backend
from lab.hookspecs import hookimpl

if TYPE_CHECKING:
    from lab.api import Check, RegisterModel


@hookimpl
def lab_register_backends(register: Callable[[type[Backend]], None]) -> None:
    from lab_mlx.backend import MlxBackend
    from lab_mlx.dflash_backend import MlxDFlashBackend
    from lab_mlx.mtp_backend import MlxMtpBackend

    register(MlxBackend)
    register(MlxDFlashBackend)
    register(MlxMtpBackend)


@hookimpl
def lab_register_models(register: RegisterModel) -> None:
    from lab_mlx.models import register_models

    register_models(register)


@hookimpl
def lab_doctor_checks(register: Callable[[Check], None]) -> None:
    from lab.api import Check
    from lab.kit.checks import import_failure, package_check

    # as `lab check` asks (MlxSession.missing_engine): an mlx that is there but does not import is missing
    fix = "bash scripts/setup.sh mlx"
    why = import_failure("mlx.core")
    register(Check("mlx", False, why, fix) if why else package_check("mlx", "mlx", fix))
    register(package_check("mlx-lm", "mlx_lm", fix))
