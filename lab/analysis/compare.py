"""What changed between two saved comparisons: per arm x prompt, tok/s,
speedup, acceptance, peak memory and verdict in run A and run B.

A speedup change counts as real only when it leaves run A's interval (or,
with no interval, moves more than the neutral band); a verdict whose kind
changed is always shown.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any, Mapping

from lab.analysis.breakeven import NEUTRAL_BAND
from lab.analysis.run import summarize

MEMORY_CHANGE = 0.10


def _name(data: Mapping[str, Any]) -> str:
    return f"{data['profile'].get('name', '?')} ({data.get('started') or '?'})"


def compare(data_a: Mapping[str, Any], data_b: Mapping[str, Any]) -> list[dict[str, Any]]:
    a = {(s["arm"], s["prompt"]): s for s in summarize(data_a["results"])}
    b = {(s["arm"], s["prompt"]): s for s in summarize(data_b["results"])}
    keys = list(a) + [k for k in b if k not in a]
    out = []
    for key in keys:
        sa, sb = a.get(key), b.get(key)
        row: dict[str, Any] = {"arm": key[0], "prompt": key[1], "in": "both" if sa and sb else ("A" if sa else "B")}
        for field in ("tok_per_s", "speedup", "acceptance_rate", "mean_accepted_len", "step_cost_tokens",
                      "peak_mem_bytes", "verdict_kind", "verdict", "status"):
            row[f"{field}_a"] = sa.get(field) if sa else None
            row[f"{field}_b"] = sb.get(field) if sb else None
        changes = []
        if sa and sb:
            sp_a, sp_b = sa.get("speedup"), sb.get("speedup")
            if sp_a is not None and sp_b is not None:
                ci = sa.get("speedup_ci")
                outside = (sp_b < ci[0] or sp_b > ci[1]) if ci else abs(sp_b - sp_a) > NEUTRAL_BAND
                if outside and abs(sp_b - sp_a) > NEUTRAL_BAND:
                    changes.append("speedup")
            if sa.get("verdict_kind") != sb.get("verdict_kind"):
                changes.append("verdict")
            if sa.get("status") != sb.get("status"):
                changes.append("status")
            ra, rb = sa.get("acceptance_rate"), sb.get("acceptance_rate")
            if ra is not None and rb is not None and abs(rb - ra) >= 0.02:
                changes.append("acceptance")
            ma, mb = sa.get("peak_mem_bytes"), sb.get("peak_mem_bytes")
            # RSS wanders by a few MiB between runs; flag what a user would act on.
            if ma and mb and abs(mb - ma) / ma >= MEMORY_CHANGE and abs(mb - ma) >= 16 * 2**20:
                changes.append("memory")
        else:
            changes.append("only in " + row["in"])
        row["changed"] = changes
        out.append(row)
    return out


def _delta(a: float | None, b: float | None, spec: str, suffix: str = "", scale: float = 1.0) -> str:
    if a is None and b is None:
        return "—"
    left = "—" if a is None else f"{a * scale:{spec}}{suffix}"
    right = "—" if b is None else f"{b * scale:{spec}}{suffix}"
    if a is None or b is None or a == 0:
        return f"{left} → {right}"
    return f"{left} → {right} ({(b - a) / abs(a) * 100:+.0f}%)"


def render_compare(data_a: Mapping[str, Any], data_b: Mapping[str, Any], fmt: str = "md") -> str:
    rows = compare(data_a, data_b)
    if fmt == "json":
        return json.dumps({"a": _name(data_a), "b": _name(data_b), "cells": rows}, indent=1, default=str) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        keys = [k for k in rows[0]] if rows else ["arm", "prompt"]
        writer = csv.DictWriter(buf, fieldnames=keys, lineterminator="\n")
        writer.writeheader()
        for r in rows:
            writer.writerow({**r, "changed": ";".join(r["changed"])})
        return buf.getvalue()
    if fmt != "md":
        raise ValueError(f"unknown report format {fmt!r}; use md, csv or json")
    lines = [
        f"# {data_a['profile'].get('name')} → {data_b['profile'].get('name')}", "",
        f"A: {_name(data_a)}  ", f"B: {_name(data_b)}", "",
        "| arm | prompt | tok/s | speedup | acceptance | step cost | peak mem | verdict | changed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        verdict = r["verdict_kind_a"] or "—"
        if r["verdict_kind_b"] != r["verdict_kind_a"]:
            verdict = f"{r['verdict_kind_a'] or '—'} → {r['verdict_kind_b'] or '—'}"
        mem_a = r["peak_mem_bytes_a"] / 2**20 if r["peak_mem_bytes_a"] else None
        mem_b = r["peak_mem_bytes_b"] / 2**20 if r["peak_mem_bytes_b"] else None
        lines.append(
            f"| {r['arm']} | {r['prompt']} | {_delta(r['tok_per_s_a'], r['tok_per_s_b'], '.1f')} | "
            f"{_delta(r['speedup_a'], r['speedup_b'], '.2f', 'x')} | "
            f"{_delta(r['acceptance_rate_a'], r['acceptance_rate_b'], '.1f', '%', 100)} | "
            f"{_delta(r['step_cost_tokens_a'], r['step_cost_tokens_b'], '.2f')} | "
            f"{_delta(mem_a, mem_b, '.0f', ' MiB')} | {verdict} | {', '.join(r['changed']) or '—'} |"
        )
    changed = [r for r in rows if r["changed"]]
    lines += ["", f"{len(changed)} of {len(rows)} cells changed. A speedup change counts when it leaves A's "
              "95% interval (or moves more than 2% without one).", ""]
    return "\n".join(lines)
