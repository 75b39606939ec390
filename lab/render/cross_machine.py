"""`lab predict` as text: an acceptance profile priced by a probe, per arm x
prompt (and category), with each input's origin stated."""

from __future__ import annotations

from typing import Sequence

from lab.analysis.acceptance_file import (
    AcceptanceFile,
    CrossPrediction,
    catch_up_words,
    cell_words,
    probe_machine_words,
    switch_words,
)
from lab.analysis.cross_check import Check
from lab.base.probe import Probe, format_widths
from lab.base.units import percent


def _curve(c: CrossPrediction) -> list[str]:
    lines = [f"  {'n_max':>5}  {'landed':>6}  {'cost':>6}  {'speedup':>7}"]
    for p in c.predictions:
        mark = " *" if p.extrapolated else ""
        best = "  <- best" if c.best is not None and p.n_max == c.best.n_max else ""
        lines.append(f"  {p.n_max:>5}  {p.landed:>6.2f}  {p.cost:>6.2f}  {p.speedup:>6.2f}x{mark}{best}")
    return lines


def _verdict(c: CrossPrediction) -> str:
    if c.best is None:
        return "  no n_max the probe covers"
    own = next((p for p in c.predictions if p.n_max == c.entry.n_max), None)
    own_text = (f"at its own n_max {own.n_max}: {own.speedup:.2f}x (break-even: a step must land {own.cost:.2f} "
                f"tokens, it lands {own.landed:.2f}); " if own is not None else "")
    paying = [p.n_max for p in c.predictions if p.speedup > 1.0]
    pays = (f"pays at n_max {format_widths(paying)}" if paying
            else "pays at no n_max the probe covers: every step costs more than it lands")
    guess = (" (past the positions measured: where to measure next)" if c.best.extrapolated else "")
    return f"  {own_text}best n_max {c.best.n_max}: {c.best.speedup:.2f}x{guess}; {pays}"


def render(profile: AcceptanceFile, probe: Probe, predictions: Sequence[CrossPrediction],
           draft_probe: Probe | None = None) -> str:
    lines = [
        "Inputs:",
        f"- acceptance per position and the share of plain tokens: the acceptance file, measured in "
        f"{profile.source_line()}",
        f"- T(w) and the baseline token ({probe.pass_seconds(1) * 1000:.3f} ms): the probe of {probe.backend} / "
        f"{probe.model} by {probe.method} on {probe_machine_words(probe)}"
        + (f", at KV depth {probe.depth}" if probe.depth is not None else "")
        + (f", measured {probe.created}" if probe.created else "")
        + ("; its T(w) prices whole steps, draft and loop inside" if probe.prices_steps else ""),
    ]
    if draft_probe is not None:
        lines.append(f"- draft seconds of a model drafter: the draft probe of {draft_probe.model}")
    lines.append("")
    for c in predictions:
        e = c.entry
        lines.append(f"{e.label}: target {e.target}, drafter {e.drafter or '?'}"
                     + (f" ({e.drafter_model})" if e.drafter_model else "")
                     + f", measured at n_max {e.n_max if e.n_max is not None else '?'}"
                     + (f", temperature {e.temperature:g}" if e.temperature is not None else "")
                     + f", {e.positions.drafting_steps} drafting steps")
        lines.append(f"  draft cost: {c.draft_from}")
        lines.append(f"  loop cost: {c.loop_from}")
        lines.append(f"  width switches: {switch_words(e, probe)}")
        lines.append(f"  cell starts: {cell_words(e, probe)}")
        if e.drafter_model:
            lines.append(f"  catch-up: {catch_up_words(e, probe, draft_probe)}")
        for w in c.warnings:
            lines.append(f"  ⚠ {w}")
        lines += _curve(c)
        lines.append(_verdict(c))
        lines.append("")
    lines += [
        "landed: expected tokens per step from the acceptance per position; cost: a step's cost in baseline tokens "
        "(T(n_max + 1) plus the draft's and the loop's), which is also the break-even: a step pays when it lands more. "
        "* marks n_max beyond the positions measured (the last position's acceptance carried on).",
    ]
    return "\n".join(lines) + "\n"


def render_check(run: str, machine: str, checks: Sequence[Check]) -> str:
    """``lab predict --against``: each prediction beside what the run
    measured, and again with the run's own acceptance."""
    lines = [f"Against the run {run}, measured on {machine}:", "",
             f"  {'arm / prompt':<28} {'n_max':>5}  {'predicted':>9}  {'measured':>8}  {'error':>7}  "
             f"{'landed (file / run)':>19}  {'run acceptance':>14}  {'error':>7}"]
    for c in checks:
        err, again = Check.error(c.predicted, c.measured), Check.error(c.with_run_acceptance, c.measured)
        lines.append(
            f"  {c.label:<28} {c.n_max:>5}  {c.predicted:>8.2f}x  "
            + (f"{c.measured:>7.2f}x" if c.measured is not None else f"{'—':>8}")
            + f"  {percent(err, '+.1f'):>7}  {c.landed_file:>8.2f} / {c.landed_run:<8.2f}  "
            + f"{c.with_run_acceptance:>13.2f}x"
            + f"  {percent(again, '+.1f'):>7}" + ("" if c.same_prompts else "  ⚠ other prompt text")
        )
    if not checks:
        lines.append("  (no entry of the acceptance file is an arm and prompt the run measured)")
    lines += [
        "",
        "measured: the run's speedup, median over its paired rounds. run acceptance: the same prediction with the "
        "run's own acceptance per position and its text's shares of plain and switching passes, every cost as "
        "above: its error is the costs' (probe, draft, loop); the difference between the two errors is the "
        "acceptance's (greedy text on another machine need not be the same text, and a lookup drafter keeps "
        "other drafts in another text). ⚠ other prompt text: the run's entry hashed other prompts.",
    ]
    return "\n".join(lines) + "\n"


