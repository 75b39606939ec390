"""Tiny models for the llama-server routes, registered through the plugin's
``lab_register_models`` hook (see lab.kit.models)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable


def _llama(out: Path) -> None:
    from lab_llamacpp_server.tiny import build_llama

    build_llama(out)


def _llama_notemplate(out: Path) -> None:
    from lab_llamacpp_server.tiny import build_llama

    build_llama(out, chat_template=False)


def _llama_dflash(out: Path) -> None:
    from lab_llamacpp_server.tiny import build_llama_dflash

    build_llama_dflash(out)


def _glm4moe_mtp(out: Path) -> None:
    from lab_llamacpp_server.tiny import build_glm4moe_mtp

    build_glm4moe_mtp(out)


def register(register_model: Callable[..., None]) -> None:
    register_model("tiny:llama", _llama, "tiny-llama.gguf", "1")
    register_model("tiny:llama-notemplate", _llama_notemplate, "tiny-llama-notemplate.gguf", "1")
    register_model("tiny:llama-dflash", _llama_dflash, "tiny-llama-dflash.gguf", "1")
    register_model("tiny:glm4moe-mtp", _glm4moe_mtp, "tiny-glm4moe-mtp.gguf", "1")
