"""What the runner emits beside the engine events of :mod:`lab.events`, and
what listens.

A run is one stream of events that every consumer subscribes to: the store
that saves it, the CLI's progress lines, the TUI's bridge. The runner emits
and knows none of them; :class:`ArmReported` and :class:`Logged` carry what
only the store used to be handed directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Union

from lab.events import Event, Finished, now
from lab.probe import ProbeReported
from lab.results import ResultRow


@dataclass(frozen=True)
class ArmReported:
    """An arm's engine report (``Backend.report()``: versions, flags, totals
    the engine kept), once, as its engine closes."""

    arm: str
    report: Mapping[str, Any]
    t: float = field(default_factory=now)


@dataclass(frozen=True)
class Logged:
    """Text for the run's lab.log: tracebacks of what failed and notes from
    backends and drafters (``BackendContext.log``)."""

    text: str
    t: float = field(default_factory=now)


# the probe phase's progress, before any arm (lab.probe)
RunEvent = Union[Event, ArmReported, Logged, ProbeReported]
Listener = Callable[[RunEvent], None]


def finished_row(event: Finished) -> ResultRow:
    """The row a Finished event carries. The runner sends a ResultRow; a
    plain saved-form mapping (a replayed or hand-made event) is read as one."""
    result: object = event.result
    if isinstance(result, ResultRow):
        return result
    assert isinstance(result, Mapping)
    return ResultRow.from_json(result)
