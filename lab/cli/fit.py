"""What ``lab check`` and ``lab run`` say about memory before anything
loads: each arm's expected bytes and parts against the budget where it
runs, and the refusal of an arm that will not fit, with what would
(:mod:`lab.profile.fit`). Not a command of its own."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TextIO

from lab.base.footprint import size_text
from lab.base.textsafe import printable
from lab.profile.fit import ArmFit, check_fit

if TYPE_CHECKING:
    from lab.base.profile import Profile
    from lab.registry import Registry


def memory_lines(fits: list[ArmFit]) -> list[str]:
    """Per arm: its expected bytes against its budget and its parts; a
    warning where it is past a line the budget only advises; then each note
    once."""
    lines = []
    notes: list[str] = []
    for fit in fits:
        lines += fit.lines()
        soft = fit.budget.soft if fit.budget is not None else None
        if fit.estimate is not None and fit.fits and soft is not None and fit.estimate.total > soft:
            lines.append(f"  warning: past Metal's recommended working set ({size_text(soft)}): llama.cpp warns at "
                         "load and the margin is thin (the write-ups' n-max 7 failed there)")
        for note in fit.estimate.notes if fit.estimate is not None else ():
            if note not in notes:
                notes.append(note)
    return lines + [f"note: {n}" for n in notes]


def report_fit(profile: Profile, registry: Registry, out: TextIO | None = None,
               err: TextIO | None = None, show: bool = True) -> list[ArmFit]:
    """Print every arm's memory to ``out`` (unless not ``show``) and each
    refusal to ``err``; returns the arms that will not fit."""
    out, err = out or sys.stdout, err or sys.stderr  # the streams of the moment, not of import time
    fits = check_fit(profile, registry)
    if show:
        print("memory (expected, where each arm runs):", file=out)
        for line in memory_lines(fits):
            print(f"  {printable(line)}", file=out)
    refused = [f for f in fits if f.fits is False]
    for fit in refused:
        print(f"lab: {printable(fit.refusal(), keep=chr(10))}", file=err)
    return refused
