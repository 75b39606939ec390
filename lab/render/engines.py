"""The report's "Engines beside the lab's loop" section: each arm that ran an
engine's own generation loop (its row's ``engine_report`` names the lab arm
of the same algorithm, ``lab_loop``, see :func:`lab.kit.engine_loop.lab_loop`)
set beside the lab's arm on the same files in the same profile: greedy
tokens identical or the first one where they part, acceptance per draft
position side by side with the engine's loop differences named, and the
lab loop's tok/s over the engine's per prompt and round."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from lab.analysis.measured_acceptance import per_position
from lab.base.textsafe import printable


@dataclass(frozen=True)
class Pair:
    engine_arm: str
    lab_arm: str
    engine_backend: str
    lab_backend: str


def _same(a: Any, b: Any) -> bool:
    # an option left out is its default; the defaults pairs name are falsy (0, "", None)
    return (a or None) == (b or None)


def pairs(profile: Mapping[str, Any], results: Sequence[Mapping[str, Any]]) -> list[Pair]:
    """Every engine arm and the first of the profile's lab arms it names by
    ``lab_loop``: same model, n_max, backend, drafter and options."""
    arms = [a for a in profile.get("arms") or () if isinstance(a, Mapping)]
    wanted: dict[str, Mapping[str, Any]] = {}
    for r in results:
        spec = (r.get("engine_report") or {}).get("lab_loop")
        if isinstance(spec, Mapping) and r.get("arm") not in wanted:
            wanted[str(r["arm"])] = spec
    out = []
    for engine_arm, spec in wanted.items():
        mine = next((a for a in arms if a.get("name") == engine_arm), None)
        if mine is None:
            continue
        for a in arms:
            if a.get("backend") != spec.get("backend") or a.get("name") == engine_arm:
                continue
            if a.get("model") != mine.get("model") or a.get("n_max") != mine.get("n_max"):
                continue
            if (a.get("drafter") or None) != (spec.get("drafter") or None):
                continue
            theirs = (a.get("drafter_options") if spec.get("drafter") else a.get("options")) or {}
            if all(_same(theirs.get(k), v) for k, v in (spec.get("options") or {}).items()):
                out.append(Pair(engine_arm, str(a["name"]), str(mine.get("backend")), str(a["backend"])))
                break
    return out


def _rows(results: Sequence[Mapping[str, Any]], arm: str) -> dict[tuple[str, int], Mapping[str, Any]]:
    return {(str(r["prompt"]), int(r["round"])): r for r in results if r.get("arm") == arm and r.get("status") == "ok"}


def _tokens(lab: Mapping[str, Any], eng: Mapping[str, Any]) -> str:
    a = (lab.get("engine_report") or {}).get("output_ids")
    b = (eng.get("engine_report") or {}).get("output_ids")
    text_same = lab.get("text") == eng.get("text")
    if not isinstance(a, list) or not isinstance(b, list):
        return "text identical" if text_same else "text differs (no token ids saved)"
    n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if n is None and len(a) == len(b):
        return f"identical ({len(a)})" + ("" if text_same else "; the detokenizers' texts differ")
    n = min(len(a), len(b)) if n is None else n
    return f"part at token {n}"


def _rates(steps: Sequence[Mapping[str, Any]], arm: str, prompt: str, width: int) -> list[float | None]:
    rates = list(per_position(s for s in steps if s.get("arm") == arm and s.get("prompt") == prompt
                              and int(s.get("round", 1)) >= 1).rates)
    return (rates + [None] * width)[:width]


def _fmt_rate(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}"


def markdown_lines(data: Mapping[str, Any]) -> list[str]:
    """The section's lines, or none when the run set no engine beside a lab arm."""
    results = data.get("results") or ()
    found = pairs(data.get("profile") or {}, results)
    if not found:
        return []
    steps = data.get("steps")
    lines = ["Each engine arm beside the lab's arm of the same algorithm on the same files: greedy tokens, "
             "conditional acceptance per draft position (lab / engine, rounds pooled), and tok/s of the lab's loop "
             "over the engine's.", "",
             "| engine arm | lab arm | prompt | round | tokens | acceptance by position (lab / engine) | lab / engine tok/s |",
             "|---|---|---|---|---|---|---|"]
    summary: list[str] = []
    notes: list[str] = []
    for p in found:
        lab_rows, eng_rows = _rows(results, p.lab_arm), _rows(results, p.engine_arm)
        ratios = []
        for key in sorted(set(lab_rows) & set(eng_rows)):
            lab, eng = lab_rows[key], eng_rows[key]
            width = int(eng.get("n_max") or 0)
            if steps is None:
                acc = "needs steps.jsonl"
            elif width:
                pairs_ = zip(_rates(steps, p.lab_arm, key[0], width), _rates(steps, p.engine_arm, key[0], width))
                acc = ", ".join(f"{_fmt_rate(a)}/{_fmt_rate(b)}" for a, b in pairs_)
            else:
                acc = "— (no drafts)"
            lt, et = lab.get("tok_per_s"), eng.get("tok_per_s")
            ratio = lt / et if isinstance(lt, (int, float)) and isinstance(et, (int, float)) and et > 0 else None
            if ratio is not None:
                ratios.append(ratio)
            lines.append(f"| {printable(p.engine_arm)} ({printable(p.engine_backend)}) | {printable(p.lab_arm)} | "
                         f"{printable(key[0])} | {key[1]} | {_tokens(lab, eng)} | {acc} | "
                         f"{'—' if ratio is None else f'{ratio:.2f}'} |")
        if ratios:
            summary.append(f"- {printable(p.lab_arm)} over {printable(p.engine_arm)}: min {min(ratios):.2f}, "
                           f"median {statistics.median(ratios):.2f}, max {max(ratios):.2f} ({len(ratios)} cells)")
        diffs: list[str] = []
        for r in eng_rows.values():
            for d in (r.get("engine_report") or {}).get("loop_differences") or ():
                if isinstance(d, str) and d not in diffs:
                    diffs.append(d)
        engine = next((str((r.get("engine_report") or {}).get("engine")) for r in eng_rows.values()
                       if (r.get("engine_report") or {}).get("engine")), p.engine_backend)
        if diffs:
            notes.append(f"- {printable(p.engine_arm)} ({printable(engine)}): " + "; ".join(printable(d) for d in diffs))
    lines += ["", "Lab loop tok/s over the engine's:", "", *summary] if summary else []
    lines += ["", "Where the engine's loop differs from the lab's:", "", *notes] if notes else []
    return lines
