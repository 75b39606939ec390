"""Tiny models for the llama-server routes, registered through the plugin's
``lab_register_models`` hook (see lab.kit.models)."""

from __future__ import annotations

from typing import Callable

from lab.kit.models import deferred

TINY = "lab_llamacpp_server.tiny"


def register(register_model: Callable[..., None]) -> None:
    register_model("tiny:llama", deferred(TINY, "build_llama"), "tiny-llama.gguf", "1")
    register_model("tiny:llama-notemplate", deferred(TINY, "build_llama", False), "tiny-llama-notemplate.gguf", "1")
    register_model("tiny:llama-dflash", deferred(TINY, "build_llama_dflash"), "tiny-llama-dflash.gguf", "1")
    register_model("tiny:glm4moe-mtp", deferred(TINY, "build_glm4moe_mtp"), "tiny-glm4moe-mtp.gguf", "1")
