"""How often the live view repaints, weighed against the engine's threads.

A repaint taken from a busy engine thread stalls every thread at the next
barrier: with a core to spare the view repaints at full rate, without one a
few times a second (the run header says so). Each arm is weighed on its own."""

from __future__ import annotations

from dataclasses import dataclass, replace

from lab.base.machine import available_cores

FULL_TEXT_HZ = 30.0
FULL_METRICS_HZ = 4.0
LEAN_TEXT_HZ = 5.0
LEAN_METRICS_HZ = 1.0


@dataclass(frozen=True)
class Cadence:
    text_hz: float
    metrics_hz: float
    # why the view is not at full rate, for the run header; "" at full rate
    reason: str = ""


FULL = Cadence(FULL_TEXT_HZ, FULL_METRICS_HZ)
LEAN = Cadence(LEAN_TEXT_HZ, LEAN_METRICS_HZ)


def cadence_for(busy_cores: int, cores: int | None = None, text_hz: float | None = None) -> Cadence:
    """The cadence while an engine keeps ``busy_cores`` CPU cores busy
    (``Backend.busy_cores``). ``text_hz`` forces a rate."""
    cores = cores or available_cores()
    if text_hz is not None:
        reason = "" if text_hz >= FULL_TEXT_HZ else f"view {text_hz:g} Hz, set"
        return Cadence(text_hz, min(FULL_METRICS_HZ, text_hz), reason)
    if cores - busy_cores >= 1:
        return FULL
    return replace(LEAN, reason=f"view {LEAN.text_hz:g} Hz: the engine keeps all {cores} cores busy")
