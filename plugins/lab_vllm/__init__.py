"""The ``vllm`` backend: a vLLM server, started by the lab or attached by URL.
Registering imports neither vLLM nor torch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from lab.api import Backend
from lab.hookspecs import hookimpl

if TYPE_CHECKING:
    from lab.api import Check


@hookimpl
def lab_register_backends(register: Callable[[type[Backend]], None]) -> None:
    from lab_vllm.backend import VllmBackend

    register(VllmBackend)


@hookimpl
def lab_doctor_checks(register: Callable[[Check], None]) -> None:
    from lab.api import Check
    from lab_vllm.install import check_install

    ok, detail = check_install()
    register(Check("vllm", ok, detail, "bash scripts/setup.sh llamacpp,vllm" if not ok else ""))
