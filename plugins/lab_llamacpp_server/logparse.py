"""Reading llama-server's log (``--log-prefix --log-timestamps``: lines of
``M.SS.mmm.uuu L message``): per-step ``accepted N/ M`` lines (with
``LLAMA_TRACE=1``), end-of-request counters (``-lv 4``), buffer sizes and
failure lines."""

from __future__ import annotations

import re
from dataclasses import dataclass

_PREFIX = re.compile(r"^(\d+)\.(\d{2})\.(\d{3})\.(\d{3}) ([IWEDT]) (.*)$")
_ACCEPTED = re.compile(r"accepted\s+(\d+)/\s*(\d+) draft tokens(\s*\(restore checkpoint\))?")
_STATS = re.compile(
    r"statistics\s+(\S+): #calls\(b,g,a\) =\s*(\d+)\s+(\d+)\s+(\d+), #gen drafts =\s*(\d+), "
    r"#acc drafts =\s*(\d+), #gen tokens =\s*(\d+), #acc tokens =\s*(\d+)"
    r"(?:.*?dur\(b,g,a\) =\s*([\d.]+),\s*([\d.]+),\s*([\d.]+) ms)?"
)
_REQ_ACCEPTANCE = re.compile(r"draft acceptance = ([\d.]+) \(\s*(\d+) accepted /\s*(\d+) generated\), mean len =\s*([\d.]+)")
_ACC_PER_POS = re.compile(r"acc per pos = \(([^)]*)\)")
_EVAL_TIME = re.compile(r"^\s*eval time =\s*([\d.]+) ms /\s*(\d+) tokens")
_TOTAL_TIME = re.compile(r"total time =\s*([\d.]+) ms")
_SLOT_TASK = re.compile(r"slot\s+\S+: id\s+(\d+) \| task (-?\d+) \|")
_RELEASED = re.compile(r"stop processing: n_tokens = ")
_BUFFER = re.compile(r"(\S+)\s+(\w+) buffer size =\s*([\d.]+) MiB")
_DRAFT_PHASE = re.compile(r"loading draft model|creating MTP draft context|draft model")

# Lines that mean the engine ran out of memory (host or device).
OOM_PATTERNS = re.compile(
    r"out of memory|OutOfMemory|failed to allocate|unable to allocate|cannot allocate|"
    r"alloc(?:ation)? failed|cudaMalloc failed|ErrorOutOfMemory|std::bad_alloc|"
    r"insufficient memory|Compute error|"
    # the dynamic loader's mmap refused under an address-space cap (memory_limit_mb)
    r"failed to map segment from shared object",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class LogLine:
    t_us: int | None
    level: str
    text: str


def split_line(raw: str) -> LogLine:
    m = _PREFIX.match(raw)
    if not m:
        return LogLine(None, "", raw)
    minutes, seconds, ms, us = (int(m.group(i)) for i in range(1, 5))
    t = ((minutes * 60 + seconds) * 1000 + ms) * 1000 + us
    return LogLine(t, m.group(5), m.group(6))


@dataclass(frozen=True)
class AcceptedLine:
    t_us: int | None
    accepted: int
    drafted: int
    restore: bool


def parse_accepted(line: LogLine) -> AcceptedLine | None:
    # at debug verbosity the server logs a second "accepted" line per step
    # (", new n_tokens = ..."); only the trace line counts
    if line.level == "D" or "new n_tokens" in line.text:
        return None
    m = _ACCEPTED.search(line.text)
    if not m:
        return None
    return AcceptedLine(line.t_us, int(m.group(1)), int(m.group(2)), bool(m.group(3)))


@dataclass(frozen=True)
class ImplStats:
    """Cumulative counters of one speculative implementation (server lifetime)."""

    impl: str
    calls_begin: int
    calls_draft: int
    calls_accept: int
    gen_drafts: int
    acc_drafts: int
    gen_tokens: int
    acc_tokens: int
    begin_ms: float | None
    draft_ms: float | None
    accept_ms: float | None


def parse_stats(line: LogLine) -> ImplStats | None:
    m = _STATS.search(line.text)
    if not m:
        return None
    ints = [int(m.group(i)) for i in range(2, 9)]
    durs = [float(m.group(i)) if m.group(i) is not None else None for i in (9, 10, 11)]
    return ImplStats(m.group(1), *ints, *durs)


@dataclass(frozen=True)
class RequestSummary:
    accepted: int
    generated: int
    mean_len: float


def parse_request_acceptance(line: LogLine) -> RequestSummary | None:
    m = _REQ_ACCEPTANCE.search(line.text)
    if not m:
        return None
    return RequestSummary(int(m.group(2)), int(m.group(3)), float(m.group(4)))


def parse_acc_per_pos(line: LogLine) -> list[float] | None:
    m = _ACC_PER_POS.search(line.text)
    if not m:
        return None
    return [float(x) for x in m.group(1).split(",") if x.strip()]


def parse_eval_time(line: LogLine) -> tuple[float, int] | None:
    m = _EVAL_TIME.search(line.text.split("|")[-1])
    return (float(m.group(1)), int(m.group(2))) if m else None


def is_total_time(line: LogLine) -> bool:
    return _TOTAL_TIME.search(line.text) is not None


def parse_buffer(line: LogLine) -> tuple[str, str, int] | None:
    """(device, kind, bytes) of a ``... buffer size = X MiB`` line."""
    m = _BUFFER.search(line.text)
    if not m:
        return None
    return m.group(1), m.group(2).strip() or "buffer", int(float(m.group(3)) * 1024 * 1024)


def starts_draft_phase(line: LogLine) -> bool:
    return _DRAFT_PHASE.search(line.text) is not None


def is_oom(text: str) -> bool:
    return OOM_PATTERNS.search(text) is not None


def slot_task(line: LogLine) -> tuple[int, int] | None:
    """(slot id, task id) of a ``slot <func>: id N | task M | ...`` line."""
    m = _SLOT_TASK.search(line.text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def is_released(line: LogLine) -> bool:
    """The slot's release line: the server logs it after the request's
    timings, acceptance and statistics lines and after its final chunk, so
    once it is in, every log line of that request is."""
    return _RELEASED.search(line.text) is not None
