"""A cross-machine prediction set against the run it predicted (``lab
predict ... --against RUN_DIR``), its error split into the costs' part and
the acceptance's, by pricing again with the run's own acceptance."""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from lab.analysis import stats
from lab.analysis.acceptance_file import PROMPT, AcceptanceFile, CrossPrediction, Entry, predict_on
from lab.base.probe import Probe


@dataclass(frozen=True)
class Check:
    label: str
    n_max: int
    predicted: float  # the file's acceptance, priced by the probe
    measured: float | None  # the run's speedup, median over its paired rounds
    landed_file: float  # tokens a step lands at n_max: the file's acceptance, the run's
    landed_run: float
    with_run_acceptance: float  # the run's acceptance and text shares, the same costs
    same_prompts: bool  # the run's entry hashed the same prompt texts

    @staticmethod
    def error(predicted: float | None, measured: float | None) -> float | None:
        """Relative error, or None where either side is missing."""
        if predicted is None or not measured:
            return None
        return predicted / measured - 1.0


def _text_of(entry: Entry, run_entry: Entry) -> Entry:
    """``entry`` with the run's acceptance per position and its text's
    shares of plain and switching passes; costs per pass left as they were."""
    costs = entry.costs
    if costs is not None and run_entry.costs is not None:
        rc = run_entry.costs
        costs = dataclasses.replace(costs, plain_share=rc.plain_share, switch_in_share=rc.switch_in_share,
                                    switch_out_share=rc.switch_out_share, second_in_share=rc.second_in_share,
                                    second_out_share=rc.second_out_share)
    return dataclasses.replace(entry, positions=run_entry.positions, costs=costs)


def check(got: Sequence[CrossPrediction], run_profile: AcceptanceFile, rows: Sequence[Mapping[str, Any]],
          probe: Probe, draft_probe: Probe | None = None, loop_s_per_step: float | None = None) -> list[Check]:
    """A check per prompt entry of ``got`` that the run measured (the same
    arm and prompt name) at the entry's own n_max."""
    theirs = {(e.arm, e.name): e for e in run_profile.entries if e.scope == PROMPT}
    out = []
    for c in got:
        e = c.entry
        other = theirs.get((e.arm, e.name))
        own = next((p for p in c.predictions if p.n_max == e.n_max), None)
        if e.scope != PROMPT or other is None or own is None:
            continue
        paired = stats.paired_ratios(rows, e.arm, e.name)
        measured = statistics.median(x for _, _, x in paired) if paired else None
        again = predict_on(_text_of(e, other), probe, draft_probe, loop_s_per_step)
        # the same probe prices the same n_max values, whatever the acceptance
        at = next(p for p in again.predictions if p.n_max == e.n_max)
        out.append(Check(e.label, own.n_max, own.speedup, measured, own.landed, at.landed, at.speedup,
                         tuple(e.prompt_sha256) == tuple(other.prompt_sha256)))
    return out
