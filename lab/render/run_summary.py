"""The lines ``lab run`` prints after its table, read back from the run
directory it saved (so they are the report's own): what to run
(:mod:`lab.render.what_to_run`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lab.registry import Registry


def what_to_run_text(run_dir: str | Path | None, registry: Registry | None = None) -> str:
    """The "What to run" lines of a saved run, between blank lines; "" for
    no run directory (a run kept in memory only). Never raises: a failure
    is one line, and never costs the run its exit status."""
    if run_dir is None:
        return ""
    from lab.render.report import load_for_report
    from lab.render.what_to_run import TITLE, text_lines

    try:
        lines = text_lines(load_for_report(run_dir), registry)
    except Exception as exc:  # noqa: BLE001 - the summary's last lines never fail the run
        return f"\n{TITLE}: not worked out ({type(exc).__name__}: {exc})\n"
    return "\n" + "\n".join(lines) + "\n" if lines else ""
