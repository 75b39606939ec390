"""Result rows: one per arm x prompt x round, with every key of the contract
(DESIGN.md, "CLI contract"). Not applicable -> None.

A :class:`ResultRow` is built once, by the runner, from the cell's steps and
generation; its figures come from :mod:`lab.figures`, the same functions the
live view uses. ``to_json`` is the form results.json saves and ``from_json``
reads it back, runs saved before a key existed included.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Sequence, TypeVar

from lab import figures, gpu
from lab.events import Cell, Status, StepEvent
from lab.verdict import verdict

if TYPE_CHECKING:
    from lab.profiles import Arm

RESULT_KEYS = (
    "arm", "backend", "drafter", "prompt", "round", "status",
    "n_tokens", "tok_per_s", "baseline_arm", "speedup",
    "steps", "drafted", "accepted", "acceptance_rate", "mean_accepted_len",
    "step_s", "draft_s", "verify_s", "step_cost_tokens", "max_yield",
    "peak_mem_bytes", "identical_to_baseline", "first_divergence_char", "verdict",
)
# Keys beyond the contract that reports and analysis use.
EXTRA_KEYS = (
    "is_baseline", "group", "stack", "model", "n_max", "sweep", "prompt_tokens", "prompt_s", "gen_s",
    "engine_bytes", "detail", "measured", "text", "text_origin", "engine_report", "plain_tokens",
    *gpu.ROW_KEYS,  # GPU telemetry (lab.gpu): null on a run without a GPU
    "category",
)
ROW_KEYS = RESULT_KEYS + EXTRA_KEYS


@dataclass(frozen=True)
class ResultRow(Mapping[str, Any]):
    """One arm x prompt x round cell as measured.

    It also reads as its saved form (``row["status"] == "ok"``, every key of
    ``to_json``), so the analysis, which works on rows read from disk, takes
    a live row unchanged.
    """

    arm: str
    backend: str
    drafter: str | None
    prompt: str
    round: int
    status: Status
    n_tokens: int | None = None
    tok_per_s: float | None = None
    baseline_arm: str | None = None
    speedup: float | None = None
    steps: int | None = None
    drafted: int | None = None
    accepted: int | None = None
    acceptance_rate: float | None = None
    mean_accepted_len: float | None = None
    step_s: float | None = None
    draft_s: float | None = None
    verify_s: float | None = None
    step_cost_tokens: float | None = None
    max_yield: int | None = None
    peak_mem_bytes: int | None = None
    identical_to_baseline: bool | None = None
    first_divergence_char: int | None = None
    verdict: str = ""
    is_baseline: bool = False
    group: str = ""
    stack: str = ""
    model: str | None = None
    n_max: int | None = None
    sweep: Mapping[str, Any] = field(default_factory=dict)
    prompt_tokens: int | None = None
    prompt_s: float | None = None
    gen_s: float | None = None
    engine_bytes: int | None = None
    detail: str = ""
    measured: str | None = None
    text: str | None = None
    # runs of [characters, 1 if they came from accepted drafts else 0]
    text_origin: tuple[tuple[int, int], ...] | None = None
    engine_report: Mapping[str, Any] = field(default_factory=dict)
    plain_tokens: int | None = None
    # GPU telemetry (lab.gpu.RunTelemetry): the card; peak device memory of
    # the arm's processes (this one and its server) and of the whole card
    # since the arm began loading; the generation phase's joules, per
    # generated token, its mean power, and the joules spent while steps
    # drafted and verified. None without a GPU.
    gpu_name: str | None = None
    gpu_peak_mem_bytes: int | None = None
    gpu_card_peak_bytes: int | None = None
    gpu_energy_j: float | None = None
    energy_per_token_j: float | None = None
    gpu_mean_power_w: float | None = None
    draft_energy_j: float | None = None
    verify_energy_j: float | None = None
    # the prompt's suite category; None for a prompt written out in the profile
    category: str | None = None
    # keys a saved row has beyond these (a later version's), kept so that
    # reading and saving a row again loses nothing
    unknown: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def cell(self) -> Cell:
        return Cell(self.arm, self.prompt, self.round)

    @property
    def ok(self) -> bool:
        return self.status == Status.OK

    # -- the saved form --------------------------------------------------------
    def _saved(self, key: str) -> Any:
        value = getattr(self, key)
        if key == "status":
            return self.status.value
        if key == "text_origin":
            return None if value is None else [list(r) for r in value]
        if key in ("sweep", "engine_report"):
            return dict(value)
        return value

    def to_json(self) -> dict[str, Any]:
        """The row as results.json holds it: the contract's keys, then the
        extras, in that order."""
        out = {k: self._saved(k) for k in ROW_KEYS}
        out.update(self.unknown)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ResultRow:
        """A saved row; keys it lacks (saved before they existed) take their
        defaults, keys unknown here are kept."""
        known = {k: data[k] for k in ROW_KEYS if k in data}
        known["status"] = Status(str(known["status"]))
        origin = known.get("text_origin")
        if origin is not None:
            known["text_origin"] = tuple((int(n), int(d)) for n, d in origin)
        for key in ("sweep", "engine_report"):
            if key in known:
                known[key] = dict(known[key] or {})
        for key in ("verdict", "detail", "group", "stack"):
            if key in known and known[key] is None:
                known[key] = ""
        unknown = {k: v for k, v in data.items() if k not in ROW_KEYS}
        return cls(**known, unknown=unknown)

    # -- Mapping: the saved form, key by key -----------------------------------------
    def __getitem__(self, key: str) -> Any:
        if key in _ROW_KEY_SET:
            return self._saved(key)
        return self.unknown[key]

    def __iter__(self) -> Iterator[str]:
        yield from ROW_KEYS
        yield from self.unknown

    def __len__(self) -> int:
        return len(ROW_KEYS) + len(self.unknown)


_ROW_KEY_SET = frozenset(ROW_KEYS)
RowT = TypeVar("RowT", bound=Mapping[str, Any])


def add_origin(runs: list[list[int]], chars: int, from_draft: bool) -> None:
    """Extend ``text_origin``: runs of [characters, 1 if they came from
    accepted drafts else 0] that cover the text in order, so a saved run can
    show which tokens the drafter landed."""
    if chars <= 0:
        return
    flag = int(from_draft)
    if runs and runs[-1][1] == flag:
        runs[-1][0] += chars
    else:
        runs.append([chars, flag])


def first_divergence(a: Sequence[object], b: Sequence[object]) -> int | None:
    """Index of the first differing item of two texts or token lists; None
    when equal, the shorter length when one is a prefix of the other."""
    if a == b:
        return None
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def _split_mean(per_step: Sequence[float], engine_report: Mapping[str, Any] | None, key: str) -> float | None:
    """Mean draft or verify seconds per step: from the steps where they carry
    it, else from the engine's per-request figure (a server tells its draft
    time only after the request, so its live steps carry none)."""
    if per_step:
        return figures.mean(per_step)
    value = (engine_report or {}).get(key)
    return float(value) if isinstance(value, (int, float)) else None


def build_result(
    *,
    arm: Arm,
    prompt: str,
    round: int,
    status: Status | str,
    steps: Sequence[StepEvent] = (),
    n_tokens: int | None = None,
    gen_s: float | None = None,
    prompt_tokens: int | None = None,
    prompt_s: float | None = None,
    text: str | None = None,
    baseline: Mapping[str, Any] | None = None,
    peak_mem_bytes: int | None = None,
    engine_bytes: int | None = None,
    detail: str = "",
    engine_report: Mapping[str, Any] | None = None,
    text_origin: Sequence[Sequence[int]] | None = None,
    gpu_keys: Mapping[str, Any] | None = None,
    category: str | None = None,
) -> ResultRow:
    """Assemble one row. ``baseline`` is the baseline's row for the same
    prompt and round (or the nearest round), used for speedup, step cost and
    greedy equivalence."""
    status = Status(status)
    ok = status == Status.OK
    speculative = not arm.is_baseline
    counted = speculative and ok
    tok_per_s = figures.tok_per_s(n_tokens, gen_s) if ok else None
    landed = sum(s.landed for s in steps)
    n_steps = len(steps) if counted else None
    drafted = sum(s.drafted for s in steps) if counted else None
    accepted = sum(s.accepted for s in steps) if counted else None
    step_s = figures.mean([s.step_s for s in steps])
    draft_vals = [s.draft_s for s in steps if s.draft_s is not None]
    verify_vals = [s.verify_s for s in steps if s.verify_s is not None]
    base_tps = baseline.get("tok_per_s") if baseline else None
    identical = None
    divergence = None
    if ok and speculative and baseline and baseline.get("text") is not None and text is not None:
        divergence = first_divergence(text, baseline["text"])
        identical = divergence is None
    origin = None
    # only when the runs add up to the text (a stream that lost a partial
    # character at the end would shift every mark after it)
    if counted and text is not None and text_origin is not None and sum(n for n, _ in text_origin) == len(text):
        origin = tuple((int(n), int(d)) for n, d in text_origin)
    row = ResultRow(
        arm=arm.name,
        backend=arm.backend,
        drafter=arm.drafter,
        prompt=prompt,
        round=round,
        status=status,
        n_tokens=n_tokens if ok else None,
        tok_per_s=tok_per_s,
        baseline_arm=arm.baseline,
        speedup=figures.speedup(tok_per_s, base_tps),
        steps=n_steps,
        drafted=drafted,
        accepted=accepted,
        acceptance_rate=figures.acceptance_rate(accepted, drafted),
        mean_accepted_len=figures.mean_accepted_len(landed, n_steps),
        step_s=step_s if ok else None,
        draft_s=_split_mean(draft_vals, engine_report, "draft_s_mean") if ok else None,
        verify_s=_split_mean(verify_vals, engine_report, "verify_s_mean") if ok else None,
        step_cost_tokens=figures.step_cost_tokens(step_s, base_tps) if ok else None,
        max_yield=figures.max_yield(arm.n_max) if speculative else None,
        peak_mem_bytes=peak_mem_bytes,
        identical_to_baseline=identical,
        first_divergence_char=divergence,
        is_baseline=arm.is_baseline,
        group=arm.group,
        stack=arm.stack,
        model=arm.model,
        n_max=arm.n_max,
        sweep=dict(arm.sweep),
        prompt_tokens=prompt_tokens,
        prompt_s=prompt_s,
        gen_s=gen_s if ok else None,
        engine_bytes=engine_bytes,
        detail=detail,
        measured=steps[0].measured if steps else None,
        text=text,
        text_origin=origin,
        engine_report=dict(engine_report or {}),
        plain_tokens=(n_tokens - landed) if counted and n_tokens is not None else None,
        **_gpu_fields(gpu_keys),
        category=category,
    )
    return dataclasses.replace(row, verdict=verdict(row))


def _gpu_fields(keys: Mapping[str, Any] | None) -> dict[str, Any]:
    """The row's GPU keys (lab.gpu.ROW_KEYS), None for each one not given."""
    return {k: (keys or {}).get(k) for k in gpu.ROW_KEYS}


def pick_baseline(rows: Iterable[RowT], arm: str, prompt: str, round: int) -> RowT | None:
    """The baseline row for a cell: same prompt and round when it succeeded,
    else the median-speed ok round of that prompt."""
    same = [r for r in rows if r["arm"] == arm and r["prompt"] == prompt and r["status"] == "ok"]
    for r in same:
        if r["round"] == round:
            return r
    if not same:
        return None
    same.sort(key=lambda r: r["tok_per_s"] or 0)
    return same[len(same) // 2]
