"""The sections of report.md by stable id: the HTML page's anchors, and
where each figure goes (:data:`lab.render.figure_data.FIGURES` names a
section by id). A heading's words may change; its id does not."""

from __future__ import annotations

import re

# id -> heading, in the order a report prints them
SECTIONS: dict[str, str] = {
    "answer": "The answer",
    "results": "Results",
    "figures": "Figures",
    "conditions": "Conditions",
    "detail": "Detail",
    "why": "Why: the step arithmetic",
    "acceptance": "Acceptance per draft position",
    "prediction": "Prediction",
    "draft-policy": "Draft policy",
    "statistics": "Statistics",
    "per-category": "Per category",
    "latency": "Latency",
    "greedy-equivalence": "Greedy equivalence",
    "engines": "Engines beside the lab's loop",
    "lossless": "Lossless at temperature > 0",
    "concurrency": "Concurrency",
    "servers": "Servers the lab attached to",
    "gpu": "GPU: memory and energy",
    "memory": "Memory: expected and measured",
    "what-to-run": "What to run",
    "roofline": "Roofline",
    "failures": "Failures",
    "not-measured": "Not measured",
    "left-running": "Left running by plugins",
}
_BY_TITLE = {title: sid for sid, title in SECTIONS.items()}

# Sections whose first paragraph sums up the rest: the page shows it and
# folds the detail below it.
FOLDED = frozenset({"conditions"})

# The figures the answer is read with, in this order.
LEAD_FIGURES = ("speedup", "verify-cost")


def heading(section_id: str) -> str:
    """The Markdown heading of a section."""
    return f"## {SECTIONS[section_id]}"


def section_id(title: str) -> str:
    """The id of a heading: its own where the report knows it, else one
    made from its words (a section a later version or a plugin adds)."""
    known = _BY_TITLE.get(title.strip())
    if known is not None:
        return known
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
    return slug or "section"
