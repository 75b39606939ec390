"""llama-server backends: ``llamacpp-server`` (any --spec-type),
``llamacpp-mtp`` and ``llamacpp-dflash``.
A server starts when an arm loads, not at registration."""

from __future__ import annotations

from lab.kit.plugin import Plugin

plugin = Plugin(backends=("lab_llamacpp_server.backend:LlamaServerBackend", "lab_llamacpp_server.backend:LlamaMtpBackend",
                          "lab_llamacpp_server.backend:LlamaDFlashBackend"),
                models=("lab_llamacpp_server.models:register",), checks=("lab_llamacpp_server.binary:doctor_checks",))
