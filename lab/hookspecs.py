"""Hook specifications: what a speclab plugin can register.

A plugin is a module (or object) exposed through an entry point in the
``lab.backends`` or ``lab.drafters`` group. It implements one or both hooks
below with ``@lab.hookimpl``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import pluggy

if TYPE_CHECKING:
    from lab.api import Backend, Drafter

hookspec = pluggy.HookspecMarker("lab")
hookimpl = pluggy.HookimplMarker("lab")


@hookspec
def lab_register_backends(register: Callable[[type[Backend]], None]) -> None:
    """Register Backend subclasses by calling ``register(cls)`` once per class.

    The class's ``name`` is what profiles put in ``backend = "..."``; it must
    be unique across plugins. Registering must not import an engine: import it
    inside ``load``. A class registered twice under one name is a load error.
    """


@hookspec
def lab_register_drafters(register: Callable[[type[Drafter]], None]) -> None:
    """Register Drafter subclasses by calling ``register(cls)`` once per class.

    The class's ``name`` is what profiles put in ``drafter = "..."``. The same
    rules as for backends apply: unique names, no engine import at
    registration time.
    """
