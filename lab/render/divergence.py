"""Why a greedy speculative output left its baseline, as the report says
it: the cause, the two picks and their logit gaps, the reproduction and the
way to a bit-exact comparison, from a row's ``engine_report["divergence"]``
(:class:`lab.api.DivergenceExplaining`); "cause not established" without it."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from lab.base.row import COLD_FIRST_ROUND

ENGINE_CAUSES = ("engine batch variance", "engine non-determinism")


def evidence(row: Mapping[str, Any]) -> Mapping[str, Any] | None:
    ev = (row.get("engine_report") or {}).get("divergence")
    return ev if isinstance(ev, Mapping) else None


def _tok(ev: Mapping[str, Any], key: str, token: Any) -> str:
    piece = ev.get(key)
    return f"{token} {piece!r}" if piece is not None else str(token)


def cause_line(row: Mapping[str, Any]) -> str:
    """One sentence: what the divergence is put down to, with its figures."""
    cause = row.get("divergence_cause") or "not established"
    ev = evidence(row)
    if ev is not None and cause == "not established" and row.get("identity_reference") == COLD_FIRST_ROUND:
        # the engine checked against the baseline, which this row was not held to
        ev = None
    if ev is None or cause == "not established":
        why = f" ({ev['reason']})" if ev is not None and ev.get("reason") else ""
        return f"cause not established{why}"
    if cause == "engine non-determinism":
        return f"engine non-determinism: {ev.get('reason', 'the engine did not repeat its own decode')}"
    token, width, row_i = ev.get("token"), ev.get("width"), ev.get("row")
    one, batch = ev.get("one_row_pick"), ev.get("batch_pick")
    base_tok, out_tok = ev.get("baseline_token"), ev.get("output_token")
    gaps = ""
    if ev.get("one_row_gap") is not None and ev.get("batch_gap") is not None:
        gaps = f" (logit gap {ev['one_row_gap']:+.4g} computed alone, {ev['batch_gap']:+.4g} in the batch)"
    if ev.get("kind") == "verify row":
        return (
            f"engine batch variance, not the drafter: at output token {token} (KV length {ev.get('kv_len')}) the "
            f"same context picks {_tok(ev, 'one_row_piece', one)} decoded as one row and "
            f"{_tok(ev, 'batch_piece', batch)} as row {row_i} of the {width}-row verify{gaps}"
        )
    return (
        f"engine batch variance, not the drafter: the common prefix decoded one row at a time leads to "
        f"{_tok(ev, 'baseline_piece', base_tok)} at output token {token}, the same prefix with the KV cache the "
        f"verify batches wrote leads to {_tok(ev, 'output_piece', out_tok)}, even decoded alone{gaps}"
    )


def markdown_lines(divs: Sequence[Mapping[str, Any]], results: Sequence[Mapping[str, Any]]) -> list[str]:
    """The report's greedy-equivalence lines: each divergence, its cause
    under it, then how to reproduce the engine's part and compare bit-exactly."""
    rows = {(r["arm"], r["prompt"], r["round"]): r for r in results}
    lines: list[str] = []
    notes: dict[str, Mapping[str, Any]] = {}
    for d in divs:
        held = " (against its cold first round)" if d.get("against") == COLD_FIRST_ROUND else ""
        lines.append(f"- {d['arm']} / {d['prompt']} r{d['round']}{held}: {d['line']}")
        row = rows.get((d["arm"], d["prompt"], d["round"]))
        if row is None:
            continue
        lines.append(f"  - {cause_line(row)}")
        ev = evidence(row)
        if ev is not None and row.get("divergence_cause") in ENGINE_CAUSES:
            notes.setdefault(str(row.get("stack") or row.get("backend")), ev)
    for stack, ev in notes.items():
        lines.append("")
        if ev.get("repro"):
            lines += [f"Reproduce the {stack} engine's batch variance outside the lab, with its own API "
                      "(from a speclab source checkout, at its root):", "",
                      "```sh", str(ev["repro"]), "```", ""]
        if ev.get("bit_exact"):
            lines.append(f"For a bit-exact comparison: {ev['bit_exact']}.")
    return lines
