"""llama.cpp in process, through llama-cpp-python's low-level API: the
backend, its derived and synthetic models and its doctor checks, registered
through ``lab.backends``. Registering loads no engine: an arm's own process
loads llama.cpp's libraries first (``native_preload``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from lab.api import Backend
from lab.hookspecs import hookimpl

if TYPE_CHECKING:
    from lab.api import Check, RegisterModel


@hookimpl
def lab_register_backends(register: Callable[[type[Backend]], None]) -> None:
    from lab_llamacpp.backend import LlamaCppBackend

    register(LlamaCppBackend)


@hookimpl
def lab_register_models(register: RegisterModel) -> None:
    from lab_llamacpp import hybrid, synthetic
    from lab_llamacpp.models import register_models

    register_models(register)
    synthetic.register_models(register)
    hybrid.register_models(register)


@hookimpl
def lab_doctor_checks(register: Callable[[Check], None]) -> None:
    from lab_llamacpp.tools import doctor_checks

    for check in doctor_checks():
        register(check)
