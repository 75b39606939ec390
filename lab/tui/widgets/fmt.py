"""Number formats shared by the widgets ("—" where not applicable)."""

from __future__ import annotations

DASH = "—"


def num(value: float | None, spec: str = ".1f") -> str:
    return DASH if value is None else format(value, spec)


def pct(value: float | None) -> str:
    return DASH if value is None else f"{value * 100:.0f}%"


def ms(value: float | None) -> str:
    return DASH if value is None else f"{value:.1f} ms"


def mib(value: int | float | None) -> str:
    return DASH if not value else f"{value / 2**20:.0f} MiB"


def speedup(value: float | None) -> str:
    return DASH if value is None else f"{value:.2f}x"
