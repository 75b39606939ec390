"""Whether a run's figures compare with a quiet machine's: not when cells ran
on fewer cores than the machine has or beside other work. The headline says
so above the verdicts."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

HEADLINE_MARK = "⚠ not comparable with a quiet machine's figures"


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def reasons(results: Sequence[Mapping[str, Any]], threads: Mapping[str, Any] | None) -> list[str]:
    """Why the run's figures are not a quiet machine's, one phrase each;
    ``threads``: what ``threads = 0`` resolved to, or None."""
    out = []
    if isinstance(threads, Mapping) and all(_number(threads.get(k)) for k in ("used", "cores", "others_cores")):
        if threads["used"] < threads["cores"]:
            out.append(f"its cells ran on {threads['used']} of {threads['cores']} cores (other processes kept "
                       f"{float(threads['others_cores']):.2f} busy as it started)")
    measured = [r for r in results if r.get("status") == "ok" and _number(r.get("round")) and int(r["round"]) >= 1]
    busy = [r for r in measured if r.get("contended")]
    if busy:
        out.append(f"{len(busy)} of {len(measured)} cells ran beside other work")
    return out


def headline(results: Sequence[Mapping[str, Any]], threads: Mapping[str, Any] | None) -> str | None:
    """The line above the verdicts when the run is not comparable (None
    when it is): what happened and what to do."""
    why = reasons(results, threads)
    if not why:
        return None
    cores = threads.get("cores") if isinstance(threads, Mapping) else None
    fix = f"`threads = {cores}` under [run]" if _number(cores) else "a fixed `threads = N` under [run]"
    return (f"{HEADLINE_MARK}: {'; '.join(why)}. The speedups below, and every verdict not said to hold at any "
            f"load, hold for these conditions only; close other work and run again, with {fix} so every run uses "
            "the same cores.")
