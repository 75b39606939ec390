"""A baseline against its engine's own tool (``[run] reference = true``):
its rate over the tool's, counted the tool's way
(:data:`lab.api.REFERENCE_COUNTS`), and whether it falls further below than
the lab can stand behind. :mod:`lab.render.conditions` words it."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median
from typing import Any, Mapping, Sequence

# a baseline this far below its engine's own tool is flagged (every tok/s is low too)
WARN_BELOW = 0.03


@dataclass(frozen=True)
class ReferenceComparison:
    """One baseline arm beside its reference: ``ratio`` is ``lab_tok_per_s``
    (median of the arm's ok rounds, counted as the tool counts) over ``tok_per_s``."""

    arm: str
    tool: str
    prompt: str | None
    n_tokens: Any
    command: str | None
    when: str | None
    tok_per_s: float | None
    lab_tok_per_s: float | None
    rounds: int
    error: str | None = None
    note: str | None = None
    # what the noise guard saw while the reference ran, when the machine was busy
    busy: str | None = None

    @property
    def ratio(self) -> float | None:
        if self.tok_per_s is None or self.lab_tok_per_s is None or self.tok_per_s <= 0:
            return None
        return self.lab_tok_per_s / self.tok_per_s

    @property
    def below(self) -> bool:
        """The lab's baseline runs more than :data:`WARN_BELOW` slower."""
        return self.ratio is not None and self.ratio < 1.0 - WARN_BELOW

    def to_json(self) -> dict[str, Any]:
        return {"arm": self.arm, "tool": self.tool, "prompt": self.prompt, "n_tokens": self.n_tokens,
                "command": self.command, "when": self.when, "tok_per_s": self.tok_per_s,
                "lab_tok_per_s": self.lab_tok_per_s, "rounds": self.rounds, "ratio": self.ratio,
                "below": self.below, "error": self.error, "note": self.note, "busy": self.busy}


def lab_rate(row: Mapping[str, Any], counts: str) -> float | None:
    """A row's rate as a tool counting ``counts`` would: "tokens" is tok_per_s,
    "decodes" takes the first token out (n - 1 one-token decodes)."""
    if counts == "decodes":
        n, gen_s = row.get("n_tokens"), row.get("gen_s")
        if not isinstance(n, int) or n < 2 or not isinstance(gen_s, (int, float)) or gen_s <= 0:
            return None
        return (n - 1) / float(gen_s)
    tps = row.get("tok_per_s")
    return float(tps) if isinstance(tps, (int, float)) and tps > 0 else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def compare_references(results: Sequence[Mapping[str, Any]],
                       machine: Mapping[str, Any] | None) -> list[ReferenceComparison]:
    """Every recorded reference beside its baseline arm's rows."""
    refs = (machine or {}).get("references")
    if not isinstance(refs, Mapping):
        return []
    out = []
    for arm, rec in refs.items():
        if not isinstance(rec, Mapping):
            continue
        prompt = rec.get("prompt")
        counts = str(rec.get("counts") or "tokens")
        rows = [r for r in results if r.get("arm") == arm and r.get("status") == "ok"
                and int(r.get("round", 1)) >= 1 and (prompt is None or r.get("prompt") == prompt)]
        rates = [x for x in (lab_rate(r, counts) for r in rows) if x is not None]
        out.append(ReferenceComparison(
            arm=str(arm), tool=str(rec.get("tool") or "?"), prompt=prompt, n_tokens=rec.get("n_tokens"),
            command=rec.get("command"), when=rec.get("when"), tok_per_s=_number(rec.get("tok_per_s")),
            lab_tok_per_s=median(rates) if rates else None, rounds=len(rates),
            error=str(rec["error"]) if rec.get("error") else None, note=rec.get("note"),
            busy=str(rec.get("contention_note") or "busy") if rec.get("contended") else None,
        ))
    return out
