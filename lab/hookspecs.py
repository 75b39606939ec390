"""Hook specifications: what a speclab plugin can register.

A plugin is a module exposed through an entry point in one of
:data:`lab.registry.GROUPS` (``lab.backends``, ``lab.drafters``,
``lab.models``) that implements any of these hooks with ``@lab.hookimpl``;
a plugin that raises becomes a listed load error, never a crash.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import pluggy

if TYPE_CHECKING:
    from lab.api import Backend, Check, Drafter, RegisterModel

hookspec = pluggy.HookspecMarker("lab")
hookimpl = pluggy.HookimplMarker("lab")


@hookspec
def lab_register_backends(register: Callable[[type[Backend]], None]) -> None:
    """Register Backend subclasses by calling ``register(cls)`` once per class.

    The class's ``name`` is what profiles put in ``backend = "..."``; it must
    be unique across plugins. Registering must not import an engine: import it
    inside ``load``. A class registered twice under one name is a load error,
    and so is ``accepts_drafters`` on a class that is not a ``Drafting``
    backend (or the reverse).
    """


@hookspec
def lab_register_drafters(register: Callable[[type[Drafter]], None]) -> None:
    """Register Drafter subclasses by calling ``register(cls)`` once per class.

    The class's ``name`` is what profiles put in ``drafter = "..."``. The same
    rules as for backends apply: unique names, no engine import at
    registration time.
    """


@hookspec
def lab_register_models(register: RegisterModel) -> None:
    """Register model builders by calling ``register(ref, builder, filename,
    version)`` once per model.

    ``ref`` is what profiles put in ``model = "..."``: ``tiny:<name>`` for a
    model the plugin writes itself, ``embedded:<name>`` for one derived from
    the embedded model. ``builder(path)`` writes the model to ``path`` (a
    file or a directory) when a profile first needs it; the result is cached
    under ``filename``, keyed by ``ref`` and ``version`` (bump it when the
    builder writes something else). A builder imports its engine only when it
    runs. A ref registered by two plugins is a load error.
    """


@hookspec
def lab_doctor_checks(register: Callable[[Check], None]) -> None:
    """Report what this plugin's engines need by calling ``register(check)``
    once per :class:`lab.api.Check` (an engine package, a binary and its
    version, a tool).

    Called only by ``lab doctor``, so a check may run a binary (with a
    timeout). A check the machine fails carries the install line that fixes
    it in ``fix``. A hook that raises becomes a failed check named after the
    plugin.
    """
