"""The report's per-category section (the table :mod:`lab.analysis.categories` computes)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from lab.analysis.categories import ALL, FEW_PAIRS, CategoryRow, category_table, has_categories
from lab.base.units import percent


def _speedup(row: CategoryRow) -> str:
    if row.speedup is None:
        return "—"
    if row.speedup_low is None or row.speedup_high is None:
        return f"{row.speedup:.2f}x"
    return f"{row.speedup:.2f}x [{row.speedup_low:.2f}–{row.speedup_high:.2f}]"


def markdown_lines(results: Sequence[Mapping[str, Any]], prompts: Sequence[Mapping[str, Any]] = ()) -> list[str]:
    """The report's per-category section: the table, then what it rests on.
    ``prompts`` are the profile's prompts as saved (for the turn counts)."""
    if not has_categories(results):
        return ["No prompt categories in this run: its prompts are written out in the profile, not taken from "
                "a suite (`[[prompts]] suite = \"speclab\"`)."]
    table = category_table(results)
    if not table:
        return ["No speculative arms, so no per-category acceptance or speedup."]
    lines = [
        "| arm | category | prompts | acceptance | mean accepted len | speedup [95% interval] | pairs | call |",
        "|---|---|---:|---:|---:|---|---:|---|",
    ]
    for r in table:
        # a question file's category is free text: keep it from splitting the table
        name = f"**{r.category}**" if r.category == ALL else r.category.replace("|", "\\|")
        mal = "—" if r.mean_accepted_len is None else f"{r.mean_accepted_len:.2f}"
        lines.append(f"| {r.arm} | {name} | {r.prompts} | {percent(r.acceptance_rate)} | {mal} | {_speedup(r)} "
                     f"| {r.pairs} | {r.call} |")
    lines += [
        "",
        "Acceptance is accepted / drafted summed over the category's rows; mean accepted length is tokens landed "
        "by steps / steps; speedup is the geometric mean of each prompt and round over its baseline's, with a 95% "
        f"percentile bootstrap interval from {FEW_PAIRS} pairs up.",
    ]
    if any(1 < r.pairs < FEW_PAIRS for r in table):
        lines.append(
            f"Below {FEW_PAIRS} pairs no interval is given (a bootstrap would restate the pairs' range); more "
            "prompts per category (per_category) or rounds make it a statement about the category."
        )
    conversations = [p for p in prompts if int(p.get("turns") or 1) > 1]
    if conversations:
        lines.append(
            f"Conversations of several turns among the prompts: {len(conversations)}. Backends take one user "
            "message, so each was measured on its first turn only."
        )
    return lines
