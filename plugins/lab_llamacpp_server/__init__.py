"""llama-server backends: ``llamacpp-server`` (any --spec-type),
``llamacpp-mtp`` and ``llamacpp-dflash``.

Registered through the ``lab.backends`` entry-point group like a third-party
plugin. Registering imports no engine and starts nothing; a server starts
when an arm loads.
"""

from __future__ import annotations

from typing import Callable

from lab.api import Backend
from lab.hookspecs import hookimpl


@hookimpl
def lab_register_backends(register: Callable[[type[Backend]], None]) -> None:
    from lab_llamacpp_server.backend import LlamaDFlashBackend, LlamaMtpBackend, LlamaServerBackend

    register(LlamaServerBackend)
    register(LlamaMtpBackend)
    register(LlamaDFlashBackend)
