"""llama.cpp in process, through llama-cpp-python's low-level API.

Registered through the ``lab.backends`` entry-point group. Nothing here
imports llama_cpp until an arm loads."""

from __future__ import annotations

from typing import Callable

from lab.api import Backend
from lab.hookspecs import hookimpl


@hookimpl
def lab_register_backends(register: Callable[[type[Backend]], None]) -> None:
    from lab_llamacpp.backend import LlamaCppBackend

    register(LlamaCppBackend)
