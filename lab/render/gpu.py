"""The report's GPU section: per arm its peak device memory, joules per token
against its baseline's, and the draft/verify split; none without GPU readings."""

from __future__ import annotations

import statistics
from typing import Any, Mapping, Sequence

GIB = 1 << 30


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def markdown_lines(results: Sequence[Mapping[str, Any]]) -> list[str]:
    rows = [r for r in results if r.get("status") == "ok" and r.get("energy_per_token_j") is not None]
    peaks = [r for r in results if r.get("gpu_peak_mem_bytes") is not None or r.get("gpu_card_peak_bytes") is not None]
    if not rows and not peaks:
        return []
    names = sorted({str(r["gpu_name"]) for r in [*rows, *peaks] if r.get("gpu_name")})
    arms: list[str] = []
    for r in [*rows, *peaks]:
        if r["arm"] not in arms:
            arms.append(r["arm"])
    per_token = {a: [float(r["energy_per_token_j"]) for r in rows if r["arm"] == a] for a in arms}
    lines = [
        f"{', '.join(names) or 'GPU'}: joules per generated token over each cell's generation phase (min / median / "
        "max over its cells), against the arm's baseline; the draft and verify shares of the joules spent while "
        "steps ran, where the lab clocked both phases.",
        "",
        "| arm | J / token | vs baseline | mean W | draft / verify share | peak GPU memory (arm / card) |",
        "|---|---|---|---|---|---|",
    ]
    for arm in arms:
        mine = [r for r in rows if r["arm"] == arm]
        jpt = per_token[arm]
        spread = f"{min(jpt):.3f} / {statistics.median(jpt):.3f} / {max(jpt):.3f}" if jpt else "—"
        base = next((r.get("baseline_arm") for r in mine if r.get("baseline_arm")), None)
        base_med = _median(per_token.get(base, [])) if base else None
        own = _median(jpt)
        ratio = f"{own / base_med:.2f}x" if own is not None and base_med else "—"
        watts = _median([float(r["gpu_mean_power_w"]) for r in mine if r.get("gpu_mean_power_w") is not None])
        total = sum(float(r["gpu_energy_j"] or 0.0) for r in mine)
        draft = [float(r["draft_energy_j"]) for r in mine if r.get("draft_energy_j") is not None]
        verify = [float(r["verify_energy_j"]) for r in mine if r.get("verify_energy_j") is not None]
        share = f"{sum(draft) / total * 100:.0f}% / {sum(verify) / total * 100:.0f}%" if draft and verify and total else "—"
        arm_rows = [r for r in peaks if r["arm"] == arm]
        arm_peak = max((int(r["gpu_peak_mem_bytes"]) for r in arm_rows if r.get("gpu_peak_mem_bytes") is not None), default=None)
        card_peak = max((int(r["gpu_card_peak_bytes"]) for r in arm_rows if r.get("gpu_card_peak_bytes") is not None), default=None)
        memory = " / ".join(f"{b / GIB:.2f} GiB" if b is not None else "—" for b in (arm_peak, card_peak))
        lines.append(f"| {arm} | {spread} | {ratio} | {watts:.0f} | {share} | {memory} |" if watts is not None
                     else f"| {arm} | {spread} | {ratio} | — | {share} | {memory} |")
    lines += [
        "",
        "The driver refreshes power and the energy counter on its own period (often 100 ms): a cell's joules "
        "are exact to one refresh at each end, and the draft/verify split apportions refresh windows by the time "
        "each phase spent in them. gpu.json holds every cell; gpu-samples.json.gz the readings.",
    ]
    return lines
