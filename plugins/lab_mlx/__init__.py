"""MLX backends: ``mlx`` (baseline, and the lab's loop for drafter plugins), ``mlx-dflash`` and
``mlx-mtp`` (block or MTP drafts, draft and verify timed apart); nothing imports mlx until an arm loads."""

from __future__ import annotations

from lab.api import Check
from lab.kit import mlx_platform
from lab.kit.checks import import_failure, package_check
from lab.kit.plugin import Plugin


def doctor_checks() -> list[Check]:
    """As ``lab check`` asks (MlxSession.missing_engine): an mlx that is there but does not import is missing,
    with the install line of this platform; where MLX cannot run, its backends are unavailable, with no fix."""
    gone = mlx_platform.unavailable()
    if gone:
        return [Check("mlx", False, f"{gone} (backends mlx, mlx-dflash, mlx-mtp, mlx-lm)")]
    fix = mlx_platform.install_line()
    why = import_failure("mlx.core")
    return [Check("mlx", False, why, fix) if why else package_check("mlx", "mlx", fix),
            package_check("mlx-lm", "mlx_lm", fix)]


plugin = Plugin(backends=("lab_mlx.backend:MlxBackend", "lab_mlx.dflash_backend:MlxDFlashBackend",
                          "lab_mlx.mtp_backend:MlxMtpBackend"),
                models=("lab_mlx.models:register_models",), checks=("lab_mlx:doctor_checks",))
