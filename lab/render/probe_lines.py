"""The report's lines about the probe: whether its curve was trusted (and
what was measured again), and how it compares with the run's own verifies
(:mod:`lab.analysis.verify_gap`)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence


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
    return ["No prediction: no trustworthy probe (why above; a refused curve is never priced with). Measure it "
            "again on a quieter machine (`lab probe`), or name a trusted one with `lab report RUN_DIR --probe FILE`."]


def verify_gap_lines(preds: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line: each row's own T(w) at the widths its steps verified against
    the probe's; ⚠ where they differ beyond both's noise."""
    shown = [f"{p['arm']} / {p['prompt']} " + ", ".join(_gap(g) for g in p["verify_gaps"])
             for p in preds if p.get("verify_gaps")]
    if not shown:
        return []
    return ["- The probe against this run's own verifies, T(w) at each width its steps verified (the median "
            "verify of w rows over the row's baseline token → the probe's T(w) at the row's depth, the gap and the "
            "noise of both; ⚠ beyond it): " + "; ".join(shown) + "."]


def _gap(g: Mapping[str, Any]) -> str:
    mark = " ⚠" if g.get("beyond_noise") else ""
    return (f"{g['width']}: {g['run_t']:.2f} → {g['probe_t']:.2f} ({g['gap'] * 100:+.0f}%, "
            f"±{g['noise'] * 100:.0f}%{mark})")
