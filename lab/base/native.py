"""An engine's native libraries loaded first, in a process the lab starts
for it (an arm's, a probe's): numpy's BLAS may bring its own OpenMP runtime,
and a ggml CPU backend loaded after it crashed at model load on a CUDA host.
Only the standard library is imported here, so that a child's entry can call
:func:`preload` before anything of the lab's."""

from __future__ import annotations

import importlib


def preload(modules: str) -> list[str]:
    """Import each comma-separated module in order; what failed, one line each
    (the engine's own load says why it cannot run, later, where it is heard)."""
    failed = []
    for module in filter(None, modules.split(",")):
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - said by the caller, once the lab can speak
            failed.append(f"{module}: {type(exc).__name__}: {exc}")
    return failed
