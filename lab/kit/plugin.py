"""A plugin as data, for an entry point to name instead of a module of hooks: what it
registers is named ``module:attribute`` and imported when the registry calls its hooks."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from lab.hookspecs import hookimpl

if TYPE_CHECKING:
    from lab.api import Backend, Check, Drafter, RegisterModel


def _load(ref: str) -> Any:
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class Plugin:
    """``backends``, ``drafters``: classes; ``models``: functions called with
    the model ``register``; ``checks``: functions returning the doctor's checks."""

    backends: tuple[str, ...] = ()
    drafters: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        bad = [ref for ref in (*self.backends, *self.drafters, *self.models, *self.checks)
               if not isinstance(ref, str) or len(ref.split(":")) != 2 or not all(ref.split(":"))]
        if bad:
            raise ValueError(f"a Plugin names what it registers as 'module:attribute', not {bad[0]!r}")

    @hookimpl
    def lab_register_backends(self, register: Callable[[type[Backend]], None]) -> None:
        for ref in self.backends:
            register(_load(ref))

    @hookimpl
    def lab_register_drafters(self, register: Callable[[type[Drafter]], None]) -> None:
        for ref in self.drafters:
            register(_load(ref))

    @hookimpl
    def lab_register_models(self, register: RegisterModel) -> None:
        for ref in self.models:
            _load(ref)(register)

    @hookimpl
    def lab_doctor_checks(self, register: Callable[[Check], None]) -> None:
        for ref in self.checks:
            for check in _load(ref)():
                register(check)
