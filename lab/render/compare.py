"""`lab report RUN_A --compare RUN_B`: what :mod:`lab.analysis.compare` found, as Markdown, CSV or JSON."""

from __future__ import annotations

import csv
import io
from typing import Any, Mapping

from lab.analysis.compare import compare, conclusion, count_line, run_name, warnings


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
    warned = warnings(data_a, data_b, rows)
    said = conclusion(data_a, data_b, rows)
    if fmt == "json":
        from lab.base.strictjson import dumps

        return dumps({"a": run_name(data_a), "b": run_name(data_b), "conclusion": said, "warnings": warned,
                      "cells": rows}, indent=1) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        keys = list(dict.fromkeys(k for r in rows for k in r)) if rows else ["arm", "prompt"]
        writer = csv.DictWriter(buf, fieldnames=keys, lineterminator="\n")
        writer.writeheader()
        for r in rows:
            writer.writerow({**r, **{k: ";".join(r[k]) for k in ("changed", "within_noise", "timing")}})
        return buf.getvalue()
    if fmt != "md":
        raise ValueError(f"unknown report format {fmt!r}; use md, csv or json")
    lines = [
        f"# {data_a['profile'].get('name')} → {data_b['profile'].get('name')}", "",
        f"A: {run_name(data_a)}  ", f"B: {run_name(data_b)}", "",
        f"**Conclusion:** {said}", "",
        *([*(f"> **warning:** {w}  " for w in warned), ""] if warned else []),
        "| arm | prompt | tok/s | speedup | acceptance | step cost | peak mem | verdict | changed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        verdict = r["verdict_kind_a"] or "—"
        if r["verdict_kind_b"] != r["verdict_kind_a"]:
            verdict = f"{r['verdict_kind_a'] or '—'} → {r['verdict_kind_b'] or '—'}"
            if "verdict" in r["within_noise"]:
                verdict += " (within noise)"
        changed = ", ".join(r["changed"]) or ("tok/s moved (timing)" if r["timing"] else "—")
        mem_a = r["peak_mem_bytes_a"] / 2**20 if r["peak_mem_bytes_a"] else None
        mem_b = r["peak_mem_bytes_b"] / 2**20 if r["peak_mem_bytes_b"] else None
        lines.append(
            f"| {r['arm']} | {r['prompt']} | {_delta(r['tok_per_s_a'], r['tok_per_s_b'], '.1f')} | "
            f"{_delta(r['speedup_a'], r['speedup_b'], '.2f', 'x')} | "
            f"{_delta(r['acceptance_rate_a'], r['acceptance_rate_b'], '.1f', '%', 100)} | "
            f"{_delta(r['step_cost_tokens_a'], r['step_cost_tokens_b'], '.2f')} | "
            f"{_delta(mem_a, mem_b, '.0f', ' MiB')} | {verdict} | {changed} |"
        )
    lines += ["", count_line(rows), ""]
    return "\n".join(lines)
