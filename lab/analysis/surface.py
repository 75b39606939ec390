"""Where drafting stops paying as the context grows: an acceptance file
priced at every KV depth of a probe surface (:class:`lab.base.probe.Surface`),
each depth against a baseline decoding at that depth; a draft model's
seconds scale with the target's one-row pass, the rest stay constant."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from lab.analysis import predict
from lab.analysis.acceptance_file import CrossPrediction, Entry, predict_on
from lab.base.probe import Probe, Surface

# A best speedup at or below this does not pay (the report's break-even is 1.0).
PAYS_ABOVE = 1.0


@dataclass(frozen=True)
class DepthPrediction:
    """One depth's predictions for one entry."""

    depth: int | None
    baseline_token_s: float  # the one-row pass at this depth
    predictions: tuple[predict.Prediction, ...]
    best: predict.Prediction | None

    @property
    def pays(self) -> bool:
        return self.best is not None and self.best.speedup > PAYS_ABOVE


@dataclass(frozen=True)
class StopsPaying:
    """The last measured depth where some n_max pays and the next, where
    none does; ``about`` is where the best speedup crosses 1.0 on the line
    between them (None when a depth is unknown)."""

    last_paying: DepthPrediction
    first_losing: DepthPrediction
    about: float | None


@dataclass(frozen=True)
class SurfacePrediction:
    # the shallowest depth as ``lab predict`` prices one probe: the inputs,
    # where the draft's and the loop's seconds came from, the warnings
    cross: CrossPrediction
    depths: tuple[DepthPrediction, ...]

    def stops_paying(self) -> StopsPaying | None:
        """The first depth, deeper than one that pays, where no n_max pays;
        None when it pays at every depth, or at none."""
        for before, after in zip(self.depths, self.depths[1:]):
            if before.pays and not after.pays:
                about = None
                if before.depth is not None and after.depth is not None and before.best and after.best:
                    drop = before.best.speedup - after.best.speedup
                    share = (before.best.speedup - PAYS_ABOVE) / drop if drop > 0 else 1.0
                    about = before.depth + share * (after.depth - before.depth)
                return StopsPaying(before, after, about)
        return None


def at_depth(entry: Entry, probe: Probe, cross: CrossPrediction) -> DepthPrediction:
    """The entry priced by one depth's probe, with the loop's seconds of
    ``cross`` (the shallowest depth's) held, and the draft's held (a lookup)
    or scaled with the target's one-row pass (a draft model)."""
    token_s = probe.pass_seconds(1)
    slower = token_s / cross.inputs.baseline_token_s if entry.drafter_model else 1.0
    inputs = dataclasses.replace(cross.inputs, baseline_token_s=token_s,
                                 draft_s_per_token=cross.inputs.draft_s_per_token * slower)
    preds = tuple(predict.predict(entry.positions, probe, inputs))
    return DepthPrediction(probe.kv_depth, probe.pass_seconds(1), preds, predict.best(preds))


def predict_on_surface(entry: Entry, surface: Surface, draft_probe: Probe | None = None,
                       loop_s_per_step: float | None = None) -> SurfacePrediction:
    # the depths together: a pass cheaper at a deeper depth breaks no single depth's rules
    surface.require_trusted()
    cross = predict_on(entry, surface.shallowest, draft_probe, loop_s_per_step)
    return SurfacePrediction(cross, tuple(at_depth(entry, p, cross) for p in surface.probes))
