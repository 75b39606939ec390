"""Numbers as text, one function per unit, each named by what it takes and
what it shows: the reports and the TUI write every figure through these.
Anything that is not a number (None included) shows as :data:`DASH`."""

from __future__ import annotations

from typing import Any

DASH = "—"


def _real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def number(value: Any, spec: str = ".1f") -> str:
    return format(value, spec) if _real(value) else DASH


def percent(fraction: Any, spec: str = ".1f") -> str:
    """0.123 -> "12.3%" (``spec="+.1f"`` for a signed change)."""
    return f"{fraction * 100:{spec}}%" if _real(fraction) else DASH


def ms_from_s(seconds: Any, spec: str = ".1f", unit: bool = False) -> str:
    """0.0123 -> "12.3", or "12.3 ms" with ``unit``."""
    return f"{seconds * 1000:{spec}}{' ms' if unit else ''}" if _real(seconds) else DASH


def milliseconds(ms: Any, spec: str = ".1f") -> str:
    """12.3 (already in ms) -> "12.3 ms"."""
    return f"{ms:{spec}} ms" if _real(ms) else DASH


def mib_from_bytes(count: Any) -> str:
    """Whole MiB; 0 bytes means not measured and shows as DASH."""
    return f"{count / 2**20:.0f} MiB" if _real(count) and count else DASH


def speedup(ratio: Any, spec: str = ".2f") -> str:
    return f"{ratio:{spec}}x" if _real(ratio) else DASH
