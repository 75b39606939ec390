"""The report's serving sections: concurrency levels and the servers the lab attached to."""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any, Mapping, Sequence

from lab.base import units


def _median(rows: Sequence[Mapping[str, Any]], key: str) -> float | None:
    values = [float(r[key]) for r in rows if isinstance(r.get(key), (int, float))]
    return statistics.median(values) if values else None


def concurrency_lines(results: Sequence[Mapping[str, Any]]) -> list[str]:
    """One table row per arm that ran with a concurrency (medians over prompts
    and rounds), grouped by profile entry, and where speculation stops paying."""
    rows = [r for r in results if r.get("status") == "ok" and r.get("concurrency")]
    if not rows:
        return []
    by_arm: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        by_arm[r["arm"]].append(r)
    lines = [
        "Each level sends that many streams of the prompt at once to the arm's own server. Aggregate tok/s: "
        "every stream's tokens over the seconds from sending to the last token (prompt processing included); "
        "speedup: against the baseline's aggregate at the same level.",
        "",
        "| arm | concurrency | aggregate tok/s | speedup | per-stream tok/s (median) | TTFT p50 ms | ITL p50 ms "
        "| ITL p95 ms | ITL p99 ms | acceptance |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    groups: dict[str, list[tuple[int, str, float | None]]] = defaultdict(list)
    drafting: set[str] = set()
    order = sorted(by_arm, key=lambda a: (str(by_arm[a][0].get("group")), int(by_arm[a][0]["concurrency"])))
    def ms(rs: Sequence[Mapping[str, Any]], key: str) -> str:
        return units.ms_from_s(_median(rs, key))

    for arm in order:
        rs = by_arm[arm]
        level = int(rs[0]["concurrency"])
        speedup = _median(rs, "aggregate_speedup")
        acc = _median(rs, "aggregate_acceptance_rate")
        lines.append(
            f"| {arm} | {level} | {units.number(_median(rs, 'aggregate_tok_per_s'))} | "
            f"{units.speedup(speedup)} | {units.number(_median(rs, 'stream_tok_per_s_p50'))} | "
            f"{ms(rs, 'concurrent_ttft_p50_s')} | {ms(rs, 'concurrent_itl_p50_s')} | "
            f"{ms(rs, 'concurrent_itl_p95_s')} | {ms(rs, 'concurrent_itl_p99_s')} | {units.percent(acc)} |"
        )
        if not rs[0].get("is_baseline"):
            groups[str(rs[0].get("group") or arm)].append((level, arm, speedup))
            if any(r.get("drafted") for r in rs):
                drafting.add(str(rs[0].get("group") or arm))
    if groups:
        lines.append("")
    for group, levels in groups.items():
        levels.sort()
        paying = [lv for lv, _, s in levels if s is not None and s > 1.0]
        losing = [lv for lv, _, s in levels if s is not None and s <= 1.0]
        curve = ", ".join(f"{lv}: {units.number(s, '.2f')}x" for lv, _, s in levels)
        if group not in drafting:
            verdict = "it drafted nothing at any level, so these ratios are run-to-run noise, not speculation"
        elif not losing:
            verdict = "pays at every level measured"
        elif not paying:
            verdict = "pays at no level measured"
        else:
            first_loss = min(lv for lv in losing if lv > min(paying)) if any(lv > min(paying) for lv in losing) else None
            verdict = (f"stops paying at concurrency {first_loss}" if first_loss is not None
                       else f"pays only from concurrency {min(paying)}")
        lines.append(f"- **{group}** speedup by concurrency ({curve}): {verdict}.")
    return lines


def attached_lines(results: Sequence[Mapping[str, Any]]) -> list[str]:
    """Arms that ran on a server the lab attached to, and whether each ran on
    a different process from its baseline."""
    url_of: dict[str, str | None] = {}
    for r in results:
        url_of.setdefault(r["arm"], r.get("server_url"))
    attached = {arm: url for arm, url in url_of.items() if url}
    if not attached:
        return []
    lines = ["The lab did not start these servers and cannot restart them between arms: each arm's figures are "
             "those of the process at its URL."]
    baseline_of = {r["arm"]: r.get("baseline_arm") for r in results}
    for arm, url in attached.items():
        base = baseline_of.get(arm)
        if base is None:
            lines.append(f"- **{arm}**: {url}")
            continue
        base_url = url_of.get(base)
        where = f"{base_url}" if base_url else "a server the lab started"
        same = " (the same URL: one process)" if base_url == url else " (a different process)"
        lines.append(f"- **{arm}**: {url}; its baseline {base} ran on {where}{same}")
    return lines
