"""The probe against a run's own verify cost: at each width a row's steps
verified, the row's T(w) (the median verify seconds of its steps of w rows
over its baseline's seconds per token, as the prediction prices a step)
beside the probe's T(w) read at the row's depth, and whether the two differ
beyond the noise of both (:mod:`lab.base.probe_rules`' intervals of the
median: the steps', the probe's repeats', the baseline rounds')."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from lab.analysis import predict
from lab.base import probe_rules
from lab.base.probe import Probe

# steps of one width a row needs before its figure is read
MIN_STEPS = 8


@dataclass(frozen=True)
class WidthGap:
    width: int
    steps: int
    run: probe_rules.Figure  # the row's own T(w)
    probe: float  # the probe's T(w) at the row's depth
    noise: float  # relative: the gap's noise, both sides' and the baseline's summed

    @property
    def gap(self) -> float:
        """The probe's T(w) over the row's, less one."""
        return self.probe / self.run.mid - 1

    @property
    def beyond(self) -> bool:
        return abs(self.gap) > self.noise

    def words(self) -> str:
        mark = " ⚠" if self.beyond else ""
        return (f"{self.width}: {self.run.mid:.2f} → {self.probe:.2f} ({self.gap * 100:+.0f}%, ±{self.noise * 100:.0f}%"
                f"{mark})")

    def to_json(self) -> dict[str, Any]:
        return {"width": self.width, "steps": self.steps, "run_t": self.run.mid, "run_t_low": self.run.lo,
                "run_t_high": self.run.hi, "probe_t": self.probe, "gap": self.gap, "noise": self.noise,
                "beyond_noise": self.beyond}


def _ok(row: Mapping[str, Any]) -> bool:
    return row.get("status") == "ok" and int(row.get("round", 1)) >= 1


def for_row(results: Sequence[Mapping[str, Any]], steps: Sequence[Mapping[str, Any]], arm: str, prompt: str,
            probe: Probe) -> list[WidthGap]:
    """Each width the row's steps verified at least :data:`MIN_STEPS` times
    and the probe measured, narrowest first. A step-priced probe's T(w) is a
    whole step that kept all its drafts: such steps are what it is set against."""
    rows = [r for r in results if r.get("arm") == arm and r.get("prompt") == prompt and _ok(r)
            and r.get("step_s") and r.get("step_cost_tokens")]
    if not rows:
        return []
    # the baseline token each round was priced in, as the prediction takes it
    base = probe_rules.figure([float(r["step_s"]) / float(r["step_cost_tokens"]) for r in rows])
    rounds = {r.get("round") for r in rows}
    whole = probe.prices_steps
    by_width: dict[int, list[float]] = {}
    for s in steps:
        if s.get("arm") != arm or s.get("prompt") != prompt or s.get("round") not in rounds:
            continue
        drafted = s.get("drafted")
        if not isinstance(drafted, int) or drafted < 1:
            continue
        if whole:
            if s.get("accepted") != drafted or not s.get("step_s"):
                continue
            seconds = float(s["step_s"])
        elif s.get("verify_s"):
            seconds = float(s["verify_s"])
        else:
            continue
        by_width.setdefault(drafted + 1, []).append(seconds)
    depth = predict.rows_depth(rows)
    out = []
    for w in sorted(by_width):
        got = by_width[w]
        if len(got) < MIN_STEPS or w not in probe.widths:
            continue
        own = probe_rules.figure(got)
        run = probe_rules.Figure(own.lo / base.mid, own.mid / base.mid, own.hi / base.mid)
        theirs = probe.t_ratio_at(w, depth)
        if theirs is None:
            continue
        probed = probe.t_interval(w)
        out.append(WidthGap(w, len(got), run, theirs, own.half_width + probed.half_width + base.half_width))
    return out


def own_width(gaps: Sequence[WidthGap], n_max: int | None) -> WidthGap | None:
    """The gap at the row's own step width (n_max + 1)."""
    return next((g for g in gaps if n_max is not None and g.width == n_max + 1), None)
