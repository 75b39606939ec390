"""llama-server backends: ``llamacpp-server`` (any --spec-type),
``llamacpp-mtp`` and ``llamacpp-dflash``.
A server starts when an arm loads, not at registration."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from lab.api import Backend
from lab.hookspecs import hookimpl

if TYPE_CHECKING:
    from lab.api import Check


@hookimpl
def lab_register_backends(register: Callable[[type[Backend]], None]) -> None:
    from lab_llamacpp_server.backend import LlamaDFlashBackend, LlamaMtpBackend, LlamaServerBackend

    register(LlamaServerBackend)
    register(LlamaMtpBackend)
    register(LlamaDFlashBackend)


@hookimpl
def lab_register_models(register: Callable[..., None]) -> None:
    from lab_llamacpp_server.models import register as register_tiny

    register_tiny(register)


@hookimpl
def lab_doctor_checks(register: Callable[[Check], None]) -> None:
    from lab.api import Check
    from lab.kit.llama_tools import build_command
    from lab_llamacpp_server.binary import ServerNotFound, server_info

    # the lookup order arms use: the binary, its build and the spec types it accepts
    try:
        register(Check("llama-server", True, server_info().describe()))
    except ServerNotFound:
        # one fix, the command that builds it here; the detail says only what is missing
        register(Check("llama-server", False, "not found on PATH or in this environment's llama.cpp build "
                       "(an arm may also name one: options = { server = \"PATH\" })", build_command()))
