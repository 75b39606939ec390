"""A run's memory: each arm's estimate beside the peak it measured.

The estimate is taken at the lengths of the arm's peak cell (its prompt and
generated tokens: :func:`lab.profile.fit.estimate_for_cell`), where the arm
ran (a row with GPU readings ran on the GPU), and held to what was sampled
there: the peak RSS of the lab's and the engine's processes on a CPU, the
arm's processes' device memory on a GPU."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from lab.base.footprint import ArmEstimate, Where, size_text
from lab.base.profile import Arm, RunSettings

if TYPE_CHECKING:
    from lab.registry import Registry

# how far measured may stray from expected before a row must say why
TOLERANCE = 0.15
# a process share past this makes the estimate mostly a measured constant
PROCESS_SHARE = 0.5


@dataclass(frozen=True)
class PeakCheck:
    """One arm's expected and measured peak."""

    arm: str
    where: Where
    expected: int | None
    measured: int | None
    measured_what: str
    why: str = ""  # why there is no expected figure, or why it strays
    estimate: ArmEstimate | None = None

    @property
    def ratio(self) -> float | None:
        if not self.expected or not self.measured:
            return None
        return self.measured / self.expected

    @property
    def within(self) -> bool | None:
        r = self.ratio
        return None if r is None else abs(r - 1) <= TOLERANCE


def saved_arms(profile: Mapping[str, Any]) -> tuple[RunSettings, list[Arm]]:
    """The run settings and arms a saved run's profile holds (what sizes
    memory; set acceptance, which does not, left out)."""
    run_fields = {f.name for f in dataclasses.fields(RunSettings)}
    run = RunSettings(**{k: v for k, v in (profile.get("run") or {}).items() if k in run_fields})
    arm_fields = {f.name for f in dataclasses.fields(Arm)} - {"acceptance"}
    arms = [Arm(**{k: v for k, v in a.items() if k in arm_fields}) for a in profile.get("arms") or []
            if isinstance(a, Mapping)]
    return run, arms


def run_place(results: Sequence[Mapping[str, Any]], machine: Mapping[str, Any] | None) -> Where:
    """Where a run's accelerated arms ran: the GPU its rows read, Metal on
    Apple silicon, else the CPU."""
    platform = str((machine or {}).get("platform") or "")
    if platform.startswith("macOS") and "arm64" in platform:
        return "metal"
    return "cuda" if any(r.get("gpu_name") for r in results) else "cpu"


def peak_checks(data: Mapping[str, Any], registry: Registry) -> list[PeakCheck]:
    """Every arm of a saved run (``lab.store.load_run``'s form) with its
    expected and measured peak."""
    from lab.profile.fit import estimate_for_cell

    results = data.get("results") or []
    try:
        run, arms = saved_arms(data.get("profile") or {})
    except TypeError:
        return []
    place = run_place(results, data.get("machine"))
    out = []
    for arm in arms:
        rows = [r for r in results if r.get("arm") == arm.name]
        if not rows:
            continue
        if arm.backend not in registry.backends:
            continue  # a backend not installed here says nothing of its arms
        got = estimate_for_cell(arm, run, registry, *_lengths(rows, run), where=place,
                                process_before_load=_peak(rows, "process_bytes"))
        if isinstance(got, str):
            out.append(PeakCheck(arm.name, "cpu", None, _peak(rows, "peak_mem_bytes"), "peak RSS", got))
            continue
        if got.where == "cpu":
            measured, what = _peak(rows, "peak_mem_bytes"), "peak RSS of the lab's and the engine's processes"
        elif got.where == "cuda":
            measured, what = _peak(rows, "gpu_peak_mem_bytes"), "peak device memory of the arm's processes"
        else:
            measured, what = _peak(rows, "peak_mem_bytes"), "peak RSS (Metal's own figure is not sampled)"
        check = PeakCheck(arm.name, got.where, got.resident, measured, what, estimate=got)
        out.append(dataclasses.replace(check, why=_why(check, rows)))
    return out


def _peak(rows: Sequence[Mapping[str, Any]], key: str) -> int | None:
    return max((int(r[key]) for r in rows if isinstance(r.get(key), int) and r[key] > 0), default=None)


def _lengths(rows: Sequence[Mapping[str, Any]], run: RunSettings) -> tuple[int, int]:
    """(prompt tokens, generated tokens) of the arm's longest cell."""
    prompt = max((int(r["prompt_tokens"]) for r in rows if isinstance(r.get("prompt_tokens"), int)), default=run.n_ctx)
    made = max((int(r["n_tokens"]) for r in rows if isinstance(r.get("n_tokens"), int)), default=run.max_tokens)
    return prompt, made


def _why(check: PeakCheck, rows: Sequence[Mapping[str, Any]]) -> str:
    """Why a measured peak strays from its estimate, where the lab can tell."""
    e = check.estimate
    if e is None or check.measured is None:
        return "no peak measured" if e is not None else ""
    if e.taken is not None:
        return "vLLM takes its share of the device whatever the model: the figure is that share, not a prediction"
    failed = sorted({str(r.get("status")) for r in rows if r.get("status") != "ok"})
    if failed:
        return f"cells ended {', '.join(failed)}: the arm may not have reached its peak"
    process = sum(p.bytes for p in e.parts if p.name == "process")
    if process and check.expected and process / check.expected > PROCESS_SHARE and not check.within:
        return (f"mostly the process ({size_text(process)}): a tiny model's figure is that, and what the "
                "engine adds to it while loading differs by machine and build")
    if check.within is False:
        return "off by more than 15%: not explained by the lab"
    return ""


def markdown_lines(checks: Sequence[PeakCheck]) -> list[str]:
    """The report's table: expected beside measured, per arm."""
    if not checks:
        return []
    lines = [
        "Each arm's expected memory (`lab check` gives it before a run: weights from the files' headers, KV cache "
        "and recurrent state from the model's shape and context, compute buffers by batch and verify width, the "
        "process's own) at its peak cell's lengths, beside the peak measured there.",
        "",
        "| arm | where | expected | measured peak | measured / expected | note |",
        "|---|---|---|---|---|---|",
    ]
    for c in checks:
        ratio = f"{c.ratio:.2f}" if c.ratio is not None else "—"
        lines.append(f"| {c.arm} | {c.where} | {size_text(c.expected)} | {size_text(c.measured)} | {ratio} | "
                     f"{c.why or ''} |")
    measured = sorted({c.measured_what for c in checks if c.measured_what})
    lines += ["", f"Measured: {'; '.join(measured)}." if measured else ""]
    return [ln for ln in lines if ln is not None]
