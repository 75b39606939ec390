"""The report's memory section: each arm's expected bytes beside its
measured peak (:mod:`lab.analysis.memory_check`). The plugins' registry is
loaded once per process, when a report first asks."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from lab.registry import Registry


@functools.lru_cache(maxsize=1)
def _registry() -> Registry:
    from lab.registry import load_registry

    return load_registry()


def section_lines(data: Mapping[str, Any]) -> list[str]:
    """``## Memory: expected and measured`` with its table, or nothing for
    a run whose arms the lab cannot estimate here."""
    from lab.analysis.memory_check import markdown_lines, peak_checks

    try:
        checks = peak_checks(data, _registry())
    except Exception as exc:  # noqa: BLE001 - the memory section never costs a report
        return ["", "## Memory: expected and measured", "", f"Not estimated: {type(exc).__name__}: {exc}"]
    body = markdown_lines(checks)
    return ["", "## Memory: expected and measured", "", *body] if body else []
