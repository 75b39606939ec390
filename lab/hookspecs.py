"""Hook specifications: what a speclab plugin can register.
A plugin is a module (or an object: :class:`lab.kit.plugin.Plugin`) behind an
entry point of :data:`lab.registry.GROUPS` implementing any of these with ``@lab.hookimpl``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import pluggy

if TYPE_CHECKING:
    from lab.api import Backend, Check, Drafter, RegisterModel

hookspec = pluggy.HookspecMarker("lab")
hookimpl = pluggy.HookimplMarker("lab")


@hookspec
def lab_register_backends(register: Callable[[type[Backend]], None]) -> None:
    """Call ``register(cls)`` once per Backend subclass. Its ``name`` (what
    profiles put in ``backend = "..."``) is unique across plugins; the engine
    is imported in ``load``, never here."""


@hookspec
def lab_register_drafters(register: Callable[[type[Drafter]], None]) -> None:
    """Call ``register(cls)`` once per Drafter subclass, as for backends."""


@hookspec
def lab_register_models(register: RegisterModel) -> None:
    """Call ``register(ref, builder, filename, version)`` once per model:
    ``builder(path)`` writes ``ref`` (``tiny:<name>``, ...) when a profile
    first needs it, cached under ``filename`` and keyed by ``version``; it
    imports its engine only when it runs."""


@hookspec
def lab_doctor_checks(register: Callable[[Check], None]) -> None:
    """Call ``register(check)`` once per :class:`lab.api.Check` the plugin's
    engines need; only ``lab doctor`` calls it, so a check may run a binary."""
