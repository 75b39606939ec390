"""What report.md says about rounds: whether they shared engine state, the
drift guard's findings beside the verdict, and the trend of warm rounds
where a paired interval would treat them as repeats."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from lab.analysis import drift

NOT_REPEATS = "⚠ rounds are not repeats"


def mode_line(results: Sequence[Mapping[str, Any]]) -> str:
    if drift.warm(results):
        return ("Rounds: warm (`warm_rounds = true`): they share engine state, so a later round meets what the "
                "earlier ones left (caches, n-gram tables); rounds are a trend, not repeats.")
    return "Rounds: cold: each round meets the engine in the state the first met."


def _values(t: drift.Trend) -> str:
    spec = ".1f" if t.metric == "tok/s" else ".0f"
    return " → ".join(format(v, spec) for v in t.values)


def _phrase(t: drift.Trend) -> str:
    if t.metric == "tok/s":
        word = "faster" if t.faster else "slower"
    else:
        word = "drafting more" if t.faster else "drafting less"
    return f"later rounds {word} by {abs(t.change) * 100:.0f} % ({t.metric} {_values(t)}; noise {t.noise * 100:.0f} %)"


def flagged(results: Sequence[Mapping[str, Any]]) -> set[str]:
    """Arms the drift guard flagged, for the verdict column."""
    return {d.arm for d in drift.round_drift(results)}


def drift_lines(results: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per flagged arm x prompt, for beside the verdict; none when
    every arm's rounds repeat."""
    out = []
    for d in drift.round_drift(results):
        why = ("asked for (warm rounds)" if d.warm
               else "state the engine kept across requests that no reset reached, or a machine that changed under the run")
        out.append(f"- {NOT_REPEATS}: **{d.arm}** / {d.prompt}: "
                   + "; ".join(_phrase(t) for t in d.trends) + f" — {why}.")
    return out


def warm_trend_line(s: Mapping[str, Any]) -> str:
    """A warm arm x prompt's rounds as a trend, in place of its interval."""
    tps = " → ".join(f"{v:.1f}" for v in s["round_tok_per_s"]) or "—"
    line = f"- {s['arm']} / {s['prompt']}: warm rounds, tok/s {tps}"
    if s["round_drafted"]:
        pairs = " → ".join(f"{d:.0f}/{a:.0f}" for d, a in zip(s["round_drafted"], s["round_accepted"]))
        line += f", drafted/accepted {pairs}"
    return line + "; no paired interval: the rounds share engine state"
