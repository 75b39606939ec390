"""The report's latency section: time to first token and inter-token gaps per arm."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from lab.analysis.run import latency_summary as summary
from lab.base.units import ms_from_s


def markdown_lines(results: Sequence[Mapping[str, Any]]) -> list[str]:
    """The report's Latency section."""
    rows = summary(results)
    if not rows:
        return ["No token arrival times were recorded (runs saved before the lab kept them)."]
    lines = [
        "| arm | prompt | TTFT ms | ITL p50 ms | ITL p95 ms | ITL p99 ms |",
        "|---|---|---|---|---|---|",
    ]
    for s in rows:
        lines.append(
            f"| {s['arm']} | {s['prompt']} | {ms_from_s(s['ttft_s'])} | {ms_from_s(s['itl_p50_s'])} | "
            f"{ms_from_s(s['itl_p95_s'])} | {ms_from_s(s['itl_p99_s'])} |"
        )
    lines += [
        "",
        "TTFT: from the request to the first token, prompt processing included. ITL: the gap before each "
        "later token; a token landing in a burst of accepted drafts arrives with no gap, so a speculative "
        "arm's low median and high tail show its burstiness. Medians over rounds.",
    ]
    return lines
