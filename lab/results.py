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

from lab import figures, gpu, serving
from lab.events import Cell, Status, StepEvent
from lab.verdict import verdict

if TYPE_CHECKING:
    from lab.contention import Contention
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
    "category", "ttft_s", "itl_p50_s", "itl_p95_s", "itl_p99_s", "divergence_cause",
    "prompt_sha256", "prompt_template", "contended", "contention", "contention_note",
) + serving.ROW_KEYS  # server arms beyond one stream: concurrency, the attached server
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
    # the shape of latency (lab.analysis.latency): seconds to the first
    # token, and percentiles of the gaps between tokens, a token inside a
    # burst of accepted drafts counting as a gap of 0
    ttft_s: float | None = None
    itl_p50_s: float | None = None
    itl_p95_s: float | None = None
    itl_p99_s: float | None = None
    # why a greedy speculative output left its baseline: what the backend's
    # check established (engine_report["divergence"]) or "not established";
    # None when it did not leave it
    divergence_cause: str | None = None
    # sha256 of the exact prompt text sent (lab.prompting) and which template made it
    prompt_sha256: str | None = None
    prompt_template: str | None = None
    # taken on a busy machine (this cell or its baseline's; lab.contention),
    # other processes' mean busy cores during this cell, and what was seen
    contended: bool | None = None
    contention: float | None = None
    contention_note: str = ""
    concurrency: int | None = None
    aggregate_tok_per_s: float | None = None
    aggregate_speedup: float | None = None
    stream_tok_per_s_p50: float | None = None
    stream_tok_per_s_min: float | None = None
    concurrent_ttft_p50_s: float | None = None
    concurrent_ttft_p95_s: float | None = None
    concurrent_itl_p50_s: float | None = None
    concurrent_itl_p95_s: float | None = None
    concurrent_itl_p99_s: float | None = None
    aggregate_acceptance_rate: float | None = None
    server_url: str | None = None
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
        for key in ("verdict", "detail", "group", "stack", "contention_note"):
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
    latency: Mapping[str, float | None] | None = None,
    contention: Contention | None = None,
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
        divergence_cause=divergence_cause(identical, engine_report),
        itl_p50_s=_latency(latency, "itl_p50_s", ok),
        itl_p95_s=_latency(latency, "itl_p95_s", ok),
        itl_p99_s=_latency(latency, "itl_p99_s", ok),
        ttft_s=_ttft_without_rehearsal(latency, engine_report) if ok else None,
        **_prompt_keys(engine_report),
        **_contention_keys(contention, baseline),
    )
    if ok:
        row = dataclasses.replace(row, **serving.row_fields(engine_report, baseline))
    return dataclasses.replace(row, verdict=verdict(row))


def _prompt_keys(engine_report: Mapping[str, Any] | None) -> dict[str, Any]:
    """The prompt's hash and template as the backend reported sending them."""
    report = engine_report or {}
    return {"prompt_sha256": report.get("prompt_sha256"), "prompt_template": report.get("prompt_template")}


def _contention_keys(reading: Contention | None, baseline: Mapping[str, Any] | None) -> dict[str, Any]:
    """Busy-machine keys: a row is contended when its own cell or its
    baseline's cell ran on a busy machine (either makes the speedup wrong)."""
    own = reading is not None and reading.contended
    base_busy = bool(baseline is not None and baseline.get("contended") and not baseline.get("baseline_arm"))
    notes = [reading.note()] if reading is not None else []
    if base_busy and baseline is not None:
        notes.append(f"its baseline's cell ran on a busy machine ({baseline.get('contention_note') or 'see its row'})")
    return {
        "contended": None if reading is None and not base_busy else bool(own or base_busy),
        "contention": round(reading.others_cores, 3) if reading is not None else None,
        "contention_note": "; ".join(notes),
    }


def _latency(shape: Mapping[str, float | None] | None, key: str, ok: bool) -> float | None:
    return shape.get(key) if ok and shape else None


def _ttft_without_rehearsal(latency: Mapping[str, float | None] | None, engine_report: Mapping[str, Any] | None) -> float | None:
    """A rehearsing drafter's untimed passes (lab.speculative.rehearse) run
    between the request and the first token: they are no part of its wait."""
    ttft = (latency or {}).get("ttft_s")
    rehearsal = float((engine_report or {}).get("rehearsal_s") or 0.0)
    return ttft if ttft is None else max(0.0, ttft - rehearsal)


def divergence_cause(identical: bool | None, engine_report: Mapping[str, Any] | None) -> str | None:
    """What the row's divergence is put down to (see lab.api.DivergenceExplaining)."""
    if identical is not False:
        return None
    evidence = (engine_report or {}).get("divergence")
    cause = evidence.get("cause") if isinstance(evidence, Mapping) else None
    return str(cause) if cause else "not established"


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
