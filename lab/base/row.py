"""The result row, one per arm x prompt x round, and its schema: the keys of
results.json, the CLI contract's keys, the CSV columns and the types
:mod:`lab.rows.shape` checks are all read off :class:`ResultRow`'s fields.
Not applicable -> None. :mod:`lab.rows.build` builds rows."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from lab.base.cells import Cell, Status

# Field metadata naming a group of keys one part of the lab fills.
GPU = {"group": "gpu"}  # GPU telemetry (lab.telemetry.gpu): null on a run without a GPU
SERVING = {"group": "serving"}  # server arms beyond one stream (lab.rows.serving)

# What a later round of warm rounds is held to for greedy identity
# (ResultRow.identity_reference): its arm's own round 1 of the prompt.
COLD_FIRST_ROUND = "cold first round"

# The CLI contract's keys, in its order: the first fields of ResultRow.
RESULT_KEYS = (
    "arm", "backend", "drafter", "prompt", "round", "status",
    "n_tokens", "tok_per_s", "baseline_arm", "speedup",
    "steps", "drafted", "accepted", "acceptance_rate", "mean_accepted_len",
    "step_s", "draft_s", "verify_s", "step_cost_tokens", "max_yield",
    "peak_mem_bytes", "identical_to_baseline", "first_divergence_char", "verdict",
)


@dataclass(frozen=True)
class ResultRow(Mapping[str, Any]):
    """One arm x prompt x round cell as measured; it reads as its saved form
    (``row["status"]``), so the analysis takes a live row unchanged."""

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
    # the arm's own process (RSS) before its model loaded, measured in the run
    process_bytes: int | None = None
    detail: str = ""
    measured: str | None = None
    text: str | None = None
    # runs of [characters, 1 if they came from accepted drafts else 0]
    text_origin: tuple[tuple[int, int], ...] | None = None
    engine_report: Mapping[str, Any] = field(default_factory=dict)
    plain_tokens: int | None = None
    # GPU telemetry (lab.telemetry.gpu): peaks since the arm began loading, the
    # generation's energy and its draft/verify split. None without a GPU.
    gpu_name: str | None = field(default=None, metadata=GPU)
    gpu_peak_mem_bytes: int | None = field(default=None, metadata=GPU)
    gpu_card_peak_bytes: int | None = field(default=None, metadata=GPU)
    gpu_energy_j: float | None = field(default=None, metadata=GPU)
    energy_per_token_j: float | None = field(default=None, metadata=GPU)
    gpu_mean_power_w: float | None = field(default=None, metadata=GPU)
    draft_energy_j: float | None = field(default=None, metadata=GPU)
    verify_energy_j: float | None = field(default=None, metadata=GPU)
    # the prompt's suite category; None for a prompt written out in the profile
    category: str | None = None
    # latency (lab.telemetry.latency): time to first token, gaps between tokens
    ttft_s: float | None = None
    itl_p50_s: float | None = None
    itl_p95_s: float | None = None
    itl_p99_s: float | None = None
    # why a greedy speculative output left its baseline (engine_report["divergence"])
    divergence_cause: str | None = None
    # what the output was compared with: "baseline", or for a warm arm's later
    # rounds "cold first round"; None when not compared
    identity_reference: str | None = None
    # sha256 of the exact prompt text sent (lab.kit.prompting) and which template made it
    prompt_sha256: str | None = None
    prompt_template: str | None = None
    # the noise guard (lab.telemetry.contention)
    contended: bool | None = None
    contention: float | None = None
    contention_note: str = ""
    # the thread count that fits, where the engine wanted more cores than were free
    threads_hint: int | None = None
    # rounds that shared engine state ([run] warm_rounds): a trend, not repeats
    warm: bool = False
    concurrency: int | None = field(default=None, metadata=SERVING)
    aggregate_tok_per_s: float | None = field(default=None, metadata=SERVING)
    aggregate_speedup: float | None = field(default=None, metadata=SERVING)
    stream_tok_per_s_p50: float | None = field(default=None, metadata=SERVING)
    stream_tok_per_s_min: float | None = field(default=None, metadata=SERVING)
    concurrent_ttft_p50_s: float | None = field(default=None, metadata=SERVING)
    concurrent_ttft_p95_s: float | None = field(default=None, metadata=SERVING)
    concurrent_itl_p50_s: float | None = field(default=None, metadata=SERVING)
    concurrent_itl_p95_s: float | None = field(default=None, metadata=SERVING)
    concurrent_itl_p99_s: float | None = field(default=None, metadata=SERVING)
    aggregate_acceptance_rate: float | None = field(default=None, metadata=SERVING)
    server_url: str | None = field(default=None, metadata=SERVING)
    # set acceptance (lab.base.set_acceptance): "kind", "value", "rates"; empty: the target decided
    set_acceptance: Mapping[str, Any] = field(default_factory=dict)
    # why the output is trivially predictable (lab.rows.output_check): acceptance not representative
    degenerate_output: str | None = None
    # the engine and drafter options, canonical: arms of one sweep share it (lab.analysis.holdout)
    draft_config: str | None = None
    # the draft-length policy (lab.base.draft_policy); None outside the lab's own loop
    draft_policy: str | None = None
    # a later version's keys, kept so that a read and save loses nothing
    unknown: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def cell(self) -> Cell:
        return Cell(self.arm, self.prompt, self.round)

    @property
    def ok(self) -> bool:
        return self.status == Status.OK

    def _saved(self, key: str) -> Any:
        value = getattr(self, key)
        if key == "status":
            return self.status.value
        if key == "text_origin":
            return None if value is None else [list(r) for r in value]
        if key in ("sweep", "engine_report", "set_acceptance"):
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
        for key in ("sweep", "engine_report", "set_acceptance"):
            if key in known:
                known[key] = dict(known[key] or {})
        for key in ("verdict", "detail", "group", "stack", "contention_note"):
            if key in known and known[key] is None:
                known[key] = ""
        unknown = {k: v for k, v in data.items() if k not in ROW_KEYS}
        return cls(**known, unknown=unknown)

    def __getitem__(self, key: str) -> Any:
        if key in _ROW_KEY_SET:
            return self._saved(key)
        return self.unknown[key]

    def __iter__(self) -> Iterator[str]:
        yield from ROW_KEYS
        yield from self.unknown

    def __len__(self) -> int:
        return len(ROW_KEYS) + len(self.unknown)


# every saved key in results.json order: the contract's, then the extras
ROW_KEYS = tuple(f.name for f in fields(ResultRow) if f.name != "unknown")
EXTRA_KEYS = ROW_KEYS[len(RESULT_KEYS):]
GPU_KEYS = tuple(f.name for f in fields(ResultRow) if f.metadata == GPU)
SERVING_KEYS = tuple(f.name for f in fields(ResultRow) if f.metadata == SERVING)
LATENCY_KEYS = ("ttft_s", "itl_p50_s", "itl_p95_s", "itl_p99_s")
DERIVED_CSV_KEYS = ("break_even_len", "needed_acceptance", "verdict_kind")
CSV_KEYS = RESULT_KEYS + (
    "prompt_tokens", "prompt_s", "gen_s", "engine_bytes", "plain_tokens", "n_max", "stack", "detail",
) + DERIVED_CSV_KEYS + ("category",) + LATENCY_KEYS + ("divergence_cause", "identity_reference") + GPU_KEYS


def field_kinds() -> dict[str, str]:
    """Each saved key's kind, read off the field's type: ``count`` (an int
    or null), ``number`` (a float or null), ``text`` / ``text?`` (a string,
    or a string or null), ``flag`` / ``flag?``, ``table``, or ``other``
    (status, round and text_origin, which the checks treat apart)."""
    kinds = {
        "int | None": "count", "float | None": "number", "str | None": "text?", "str": "text",
        "bool | None": "flag?", "bool": "flag", "Mapping[str, Any]": "table",
    }
    return {f.name: kinds.get(str(f.type), "other") for f in fields(ResultRow) if f.name != "unknown"}


_ROW_KEY_SET = frozenset(ROW_KEYS)
RowT = TypeVar("RowT", bound=Mapping[str, Any])
