"""The report's lines about the probe: whether its curve was trusted (and
what was measured again)."""

from __future__ import annotations

from typing import Any, Sequence


def trust_clause(pr: Any) -> str:
    """After the probe's figures: the rules it was checked against, or why
    it was refused and the rows that are left without a prediction."""
    if pr.trusted:
        return f"; {pr.trust_words()}"
    arms = pr.origin.get("arms")
    rows = f" for {', '.join(map(str, arms))}" if isinstance(arms, (list, tuple)) and arms else ""
    return f"; **{pr.trust_words()}**, so no prediction{rows} and no draft-policy replay"


def untrusted_line(pool: Sequence[Any]) -> list[str]:
    """One line where no row could be predicted because its probe was refused."""
    if all(pr.trusted for pr in pool):
        return []
    return ["No prediction: no trustworthy probe (why above; a curve that breaks a rule no machine can is never "
            "used). Measure it again on a quieter machine (`lab probe`), or name a trusted one with "
            "`lab report RUN_DIR --probe FILE`."]
