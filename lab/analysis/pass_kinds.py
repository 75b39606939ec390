"""What a run's target passes cost by kind (switch, second, steady: see
:data:`lab.base.probe.SWITCH_PASS`) beside the probe's figures for the same
kinds, per speculative arm x prompt whose passes switched; missing figures
are left out, never guessed."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from lab.analysis.predict import probe_for, saved_count
from lab.base.probe import SECOND_PASS, STEADY_PASS, SWITCH_PASS, Probe, saved_seconds

# the kinds shown; a cell's first pass follows its prompt, which no probe figure prices
KINDS = (SWITCH_PASS, SECOND_PASS, STEADY_PASS)


@dataclass(frozen=True)
class KindSeconds:
    """Passes of one kind: how many, their seconds (a median for steps, a
    mean for plain decodes) and the probe's seconds for the kind, None
    where it timed none."""

    kind: str
    passes: int
    seconds: float
    probe_s: float | None


@dataclass(frozen=True)
class PassKinds:
    """One arm x prompt's passes by kind; ``width`` is the rows of the steps
    shown (None where no step told its kind)."""

    arm: str
    prompt: str
    width: int | None
    steps: tuple[KindSeconds, ...]
    plain: tuple[KindSeconds, ...]

    @property
    def probe_timed(self) -> bool:
        return any(k.probe_s is not None for k in self.steps + self.plain)

    def to_json(self) -> dict[str, Any]:
        return {
            "arm": self.arm, "prompt": self.prompt, "width": self.width, "probe_timed": self.probe_timed,
            "steps": [{"kind": k.kind, "steps": k.passes, "median_verify_s": k.seconds, "probe_s": k.probe_s}
                      for k in self.steps],
            "plain": [{"kind": k.kind, "decodes": k.passes, "mean_s": k.seconds, "probe_s": k.probe_s}
                      for k in self.plain],
        }


def pass_kinds(results: Sequence[Mapping[str, Any]], steps: Sequence[Mapping[str, Any]],
               probes: Sequence[Probe] | Probe | None) -> list[PassKinds]:
    """Every speculative arm x prompt whose passes switched, in run order,
    priced by its own stack's probe."""
    pool = [probes] if isinstance(probes, Probe) else [p for p in probes or () if p is not None]
    out = []
    for (arm, prompt), rows in _speculative_groups(results).items():
        rounds = {r.get("round") for r in rows}
        mine = [s for s in steps if isinstance(s, Mapping) and s.get("arm") == arm and s.get("prompt") == prompt
                and s.get("round") in rounds]
        width = _width(mine)
        timed = _step_seconds(mine, width)
        plain = _plain_seconds(rows)
        if not any(timed.get(k) or plain.get(k, (0, 0.0))[0] for k in (SWITCH_PASS, SECOND_PASS)):
            continue
        probe = probe_for(rows[0], pool)[0] if pool else None
        # the probe's (w rows, one row) seconds per kind at the steps' width
        timed_by_probe = (probe.switch_passes(width) if probe is not None and width is not None else None) or {}
        out.append(PassKinds(
            arm, prompt, width,
            tuple(KindSeconds(k, len(timed[k]), statistics.median(timed[k]), timed_by_probe.get(k, (None, None))[0])
                  for k in KINDS if timed.get(k)),
            tuple(KindSeconds(k, plain[k][0], plain[k][1] / plain[k][0], timed_by_probe.get(k, (None, None))[1])
                  for k in KINDS if plain.get(k, (0, 0.0))[0]),
        ))
    return out


def _speculative_groups(results: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], list[Mapping[str, Any]]]:
    """The ok measured rounds (warmup left out) of every arm that drafts, per
    arm x prompt, in the order they ran."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in results:
        if (not isinstance(r, Mapping) or r.get("is_baseline") or r.get("status") != "ok"
                or not isinstance(r.get("round"), int) or r["round"] < 1):
            continue
        groups.setdefault((str(r.get("arm")), str(r.get("prompt"))), []).append(r)
    return groups


def _width(steps: Sequence[Mapping[str, Any]]) -> int | None:
    """The rows most of the steps that told their kind verified (drafted + 1;
    the wider on a tie, as a fixed n_max's steps are); None without such steps."""
    widths = Counter(int(s["drafted"]) + 1 for s in steps
                     if s.get("pass_kind") in KINDS and saved_count(s.get("drafted")))
    if not widths:
        return None
    return max(widths, key=lambda w: (widths[w], w))


def _step_seconds(steps: Sequence[Mapping[str, Any]], width: int | None) -> dict[str, list[float]]:
    """Verify seconds of the steps of ``width`` rows by kind; a step with
    damaged seconds or kind is left out."""
    out: dict[str, list[float]] = {}
    for s in steps:
        kind, secs = s.get("pass_kind"), saved_seconds(s.get("verify_s"))
        if kind in KINDS and secs is not None and saved_count(s.get("drafted")) and int(s["drafted"]) + 1 == width:
            out.setdefault(kind, []).append(secs)
    return out


def _plain_seconds(rows: Sequence[Mapping[str, Any]]) -> dict[str, tuple[int, float]]:
    """Plain decodes by kind over the rows' engine_report, (count, seconds)."""
    out: dict[str, tuple[int, float]] = {}
    for r in rows:
        report = r.get("engine_report")
        if not isinstance(report, Mapping):
            continue
        for kind in KINDS:
            n, secs = saved_count(report.get(f"{kind}_plain")), saved_seconds(report.get(f"{kind}_plain_s"))
            if n and secs is not None:
                had = out.get(kind, (0, 0.0))
                out[kind] = (had[0] + n, had[1] + secs)
    return out

