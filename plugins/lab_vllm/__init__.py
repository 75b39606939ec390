"""The ``vllm`` backend: a vLLM server, started by the lab or attached by URL.
Registering imports neither vLLM nor torch."""

from __future__ import annotations

from lab.kit.plugin import Plugin

plugin = Plugin(backends=("lab_vllm.backend:VllmBackend",), checks=("lab_vllm.install:doctor_checks",))
