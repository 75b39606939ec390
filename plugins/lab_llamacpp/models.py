"""GGUF models derived from the embedded SmolLM2 with llama.cpp's own tools,
and the tiny Gemma-3-style models (lab_llamacpp.tiny_arch), registered
through the plugin's ``lab_register_models`` hook."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from lab.kit.models import deferred

if TYPE_CHECKING:
    from lab.api import RegisterModel


def _smollm2_q4_0(out: Path) -> None:
    from lab.kit.models import embedded_smollm2
    from lab_llamacpp.engine import quantize

    quantize(str(embedded_smollm2()), str(out), "Q4_0")


def register_models(register_model: RegisterModel) -> None:
    # A cheaper draft for the embedded target: the same weights requantized
    # from Q4_1 to Q4_0 with llama.cpp's quantize API (same vocabulary).
    register_model("embedded:smollm2-q4_0", _smollm2_q4_0, "SmolLM2-135M-Instruct.Q4_0.gguf", "1")
    # Near-tie models of another architecture, for greedy-equivalence runs.
    register_model("tiny:gemma3", deferred("lab_llamacpp.tiny_arch", "build_gemma3"), "tiny-gemma3.F16.gguf", "1")
    register_model("tiny:gemma3-q4_k_m", deferred("lab_llamacpp.tiny_arch", "build_gemma3_q4_k_m"),
                   "tiny-gemma3.Q4_K_M.gguf", "1")
