"""Reports of a saved run: Markdown shaped like the write-ups' tables, CSV of
every row, JSON as saved."""

from __future__ import annotations

import csv
import io
import json
import statistics
from typing import Any, Iterable, Mapping, Sequence

from lab.results import RESULT_KEYS


def _fmt(value: Any, spec: str = ".2f", none: str = "—") -> str:
    if value is None:
        return none
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return format(value, spec)
    return str(value)


def _mib(value: Any) -> str:
    return "—" if not value else f"{value / 2**20:.0f} MiB"


def _median(values: Iterable[Any]) -> float | None:
    xs = [v for v in values if v is not None]
    return statistics.median(xs) if xs else None


def summarize(results: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per arm x prompt over its rounds: medians of the ok rounds,
    the min-max of tok/s, and the verdict of the median round."""
    order: list[tuple[str, str]] = []
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in results:
        key = (r["arm"], r["prompt"])
        if key not in groups:
            order.append(key)
            groups[key] = []
        groups[key].append(r)
    out = []
    for key in order:
        rows = groups[key]
        ok = [r for r in rows if r["status"] == "ok"]
        statuses = sorted({r["status"] for r in rows})
        first = rows[0]
        tps = [r["tok_per_s"] for r in ok if r["tok_per_s"] is not None]
        median_row = sorted(ok, key=lambda r: r["tok_per_s"] or 0)[len(ok) // 2] if ok else rows[0]
        identical = [r["identical_to_baseline"] for r in ok if r["identical_to_baseline"] is not None]
        divergences = [r["first_divergence_char"] for r in ok if r["first_divergence_char"] is not None]
        out.append({
            "arm": key[0], "prompt": key[1], "backend": first["backend"], "drafter": first["drafter"],
            "status": "ok" if statuses == ["ok"] else "/".join(statuses),
            "rounds": len(ok),
            "tok_per_s": _median(tps), "tok_per_s_min": min(tps) if tps else None, "tok_per_s_max": max(tps) if tps else None,
            "speedup": _median(r["speedup"] for r in ok),
            "acceptance_rate": _median(r["acceptance_rate"] for r in ok),
            "mean_accepted_len": _median(r["mean_accepted_len"] for r in ok),
            "draft_s": _median(r["draft_s"] for r in ok),
            "verify_s": _median(r["verify_s"] for r in ok),
            "step_cost_tokens": _median(r["step_cost_tokens"] for r in ok),
            "max_yield": first.get("max_yield"),
            "peak_mem_bytes": max((r["peak_mem_bytes"] or 0 for r in rows), default=0) or None,
            "identical_to_baseline": all(identical) if identical else None,
            "first_divergence_char": min(divergences) if divergences else None,
            "verdict": median_row["verdict"],
        })
    return out


def render_markdown(data: Mapping[str, Any]) -> str:
    profile = data["profile"]
    run = profile.get("run", {})
    lines = [f"# {profile['name']}", ""]
    if profile.get("description"):
        lines += [profile["description"], ""]
    lines += [
        f"Greedy: {'yes' if not run.get('temperature') else 'no (T=' + str(run.get('temperature')) + ')'}, "
        f"{run.get('max_tokens')} tokens, {run.get('rounds')} rounds after {run.get('warmup')} warmup. "
        f"Started {data.get('started')}" + (" (cancelled)" if data.get("cancelled") else "") + ".",
        "",
        "| arm | prompt | tok/s (min–max) | speedup | acceptance | mean len | draft ms | verify ms | step cost / max yield | peak mem | identical | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summarize(data["results"]):
        tps = _fmt(s["tok_per_s"], ".1f")
        if s["tok_per_s_min"] is not None and s["rounds"] > 1:
            tps += f" ({s['tok_per_s_min']:.1f}–{s['tok_per_s_max']:.1f})"
        cost = "—" if s["step_cost_tokens"] is None else f"{s['step_cost_tokens']:.2f} / {s['max_yield']}"
        ident = _fmt(s["identical_to_baseline"])
        if s["first_divergence_char"] is not None:
            ident += f" (char {s['first_divergence_char']})"
        lines.append(
            f"| {s['arm']} | {s['prompt']} | {tps if s['status'] == 'ok' else s['status']} | "
            f"{_fmt(s['speedup'], '.2f')}{'x' if s['speedup'] is not None else ''} | "
            f"{_fmt(s['acceptance_rate'] * 100 if s['acceptance_rate'] is not None else None, '.1f')}{'%' if s['acceptance_rate'] is not None else ''} | "
            f"{_fmt(s['mean_accepted_len'])} | "
            f"{_fmt(s['draft_s'] * 1000 if s['draft_s'] is not None else None, '.2f')} | "
            f"{_fmt(s['verify_s'] * 1000 if s['verify_s'] is not None else None, '.2f')} | "
            f"{cost} | {_mib(s['peak_mem_bytes'])} | {ident} | {s['verdict']} |"
        )
    failures = [r for r in data["results"] if r["status"] != "ok" and r.get("detail")]
    if failures:
        lines += ["", "## Failures", ""]
        seen: set[tuple[str, str]] = set()
        for r in failures:
            key = (r["arm"], r["status"])
            if key in seen:
                continue
            seen.add(key)
            first_line = str(r["detail"]).splitlines()[0]
            lines.append(f"- **{r['arm']}** {r['status']}: {first_line}")
    lines += [
        "",
        "Speedup is against each arm's own stack baseline, same prompt and round. Step cost is a step's "
        "seconds over the baseline's seconds per token; a step can land at most max yield = n_max + 1 tokens.",
        "",
    ]
    return "\n".join(lines)


CSV_KEYS = RESULT_KEYS + ("prompt_tokens", "prompt_s", "gen_s", "engine_bytes", "plain_tokens", "n_max", "stack", "detail")


def render_csv(data: Mapping[str, Any]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(CSV_KEYS), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for r in data["results"]:
        row = {k: r.get(k) for k in CSV_KEYS}
        if row.get("detail"):
            row["detail"] = str(row["detail"]).splitlines()[0]
        writer.writerow(row)
    return buf.getvalue()


def render_json(data: Mapping[str, Any]) -> str:
    return json.dumps(data, indent=1, default=str) + "\n"


def render(data: Mapping[str, Any], fmt: str) -> str:
    if fmt == "md":
        return render_markdown(data)
    if fmt == "csv":
        return render_csv(data)
    if fmt == "json":
        return render_json(data)
    raise ValueError(f"unknown report format {fmt!r}; use md, csv or json")
