"""``tiny:`` MLX models, registered through the plugin's
``lab_register_models`` hook. Builders import MLX only when they run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lab.kit.models import deferred

if TYPE_CHECKING:
    from lab.api import RegisterModel

TINY = "lab_mlx.tiny"


def register_models(register_model: RegisterModel) -> None:
    register_model("tiny:qwen3", deferred(TINY, "write_target"), "tiny-qwen3-mlx", "3")
    register_model("tiny:qwen3.5-hybrid", deferred(TINY, "write_hybrid_target"), "tiny-qwen3.5-hybrid-mlx", "2")
    register_model("tiny:qwen3-draft", deferred(TINY, "write_draft_model"), "tiny-qwen3-draft-mlx", "2")
    register_model("tiny:qwen3-dflash", deferred(TINY, "write_dflash"), "tiny-qwen3-dflash-mlx", "3")
    register_model("tiny:qwen3-dflash2", deferred(TINY, "write_dflash2"), "tiny-qwen3-dflash2-mlx", "3")
    register_model("tiny:qwen3-mtp", deferred(TINY, "write_mtp"), "tiny-qwen3-mtp-mlx", "1")
