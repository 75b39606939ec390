"""``tiny:`` MLX models, registered through the plugin's
``lab_register_models`` hook. Builders import MLX only when they run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lab.api import RegisterModel


def _target(out: Path) -> None:
    from lab_mlx.tiny import write_target

    write_target(out)


def _hybrid(out: Path) -> None:
    from lab_mlx.tiny import write_hybrid_target

    write_hybrid_target(out)


def _draft_model(out: Path) -> None:
    from lab_mlx.tiny import write_draft_model

    write_draft_model(out)


def _dflash(out: Path) -> None:
    from lab_mlx.tiny import write_dflash

    write_dflash(out)


def _dflash2(out: Path) -> None:
    from lab_mlx.tiny import write_dflash2

    write_dflash2(out)


def _mtp(out: Path) -> None:
    from lab_mlx.tiny import write_mtp

    write_mtp(out)


def register_models(register_model: RegisterModel) -> None:
    register_model("tiny:qwen3", _target, "tiny-qwen3-mlx", "3")
    register_model("tiny:qwen3.5-hybrid", _hybrid, "tiny-qwen3.5-hybrid-mlx", "2")
    register_model("tiny:qwen3-draft", _draft_model, "tiny-qwen3-draft-mlx", "2")
    register_model("tiny:qwen3-dflash", _dflash, "tiny-qwen3-dflash-mlx", "2")
    register_model("tiny:qwen3-dflash2", _dflash2, "tiny-qwen3-dflash2-mlx", "2")
    register_model("tiny:qwen3-mtp", _mtp, "tiny-qwen3-mtp-mlx", "1")
