"""The server's Prometheus ``/metrics`` text, and device memory from nvidia-smi."""

from __future__ import annotations

import math
import re
import shutil
import subprocess

_SAMPLE = re.compile(r'^llamacpp:([A-Za-z0-9_]+)(?:\{([^}]{0,200})\})?\s+([-+0-9.eE]{1,40}|nan|NaN|[+-]?[Ii]nf)\s*$')
# llama-server exports a few dozen counters and one per draft position:
# more than this is no llama-server, and is cut here, not kept.
MAX_COUNTERS = 512
MAX_POSITIONS = 64
# Names of dropped counters kept for a note.
MAX_DROPPED = 20


def parse_metrics(text: str, dropped: list[str] | None = None) -> dict[str, float]:
    """Flat map: ``name`` or ``name{label="v"}`` -> value, at most
    MAX_COUNTERS; a non-finite value is left out and named in ``dropped``."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("llamacpp:") and not line.lstrip().startswith("llamacpp:"):
            continue
        m = _SAMPLE.match(line.strip())
        if not m:
            continue
        key = m.group(1) + (f"{{{m.group(2)}}}" if m.group(2) else "")
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        if not math.isfinite(value):
            if dropped is not None and key not in dropped and len(dropped) < MAX_DROPPED:
                dropped.append(key)
            continue
        out[key] = value
        if len(out) >= MAX_COUNTERS:
            break
    return out


PER_POS = "spec_decode_num_accepted_tokens_per_pos_total{"
SPEC_COUNTERS = (
    "spec_decode_num_draft_tokens_total",
    "spec_decode_num_accepted_tokens_total",
    "spec_decode_num_drafts_total",
    "tokens_predicted_total",
)


def counter_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """What one request added to the cumulative counters (per-position
    acceptance included)."""
    out: dict[str, float] = {}
    for key, value in after.items():
        if key in SPEC_COUNTERS or key.startswith(PER_POS):
            out[key] = value - before.get(key, 0.0)
    return out


def per_position(delta: dict[str, float]) -> list[int]:
    """Accepted tokens per draft position, in position order."""
    found: dict[int, int] = {}
    for key, value in delta.items():
        if key.startswith(PER_POS):
            m = re.search(r'(?:pos|position)="?(\d{1,4})"?', key)
            # a position past any n_max, or a count no float holds exactly, is no count
            if m and int(m.group(1)) < MAX_POSITIONS and math.isfinite(value) and abs(value) < 1 << 53:
                found[int(m.group(1))] = int(round(value))
    return [found[i] for i in sorted(found)]


def without_positions(delta: dict[str, float]) -> dict[str, float]:
    """``delta`` without its per-position counters: a report keeps those
    once, as :func:`per_position`'s list."""
    return {k: v for k, v in delta.items() if not k.startswith(PER_POS)}


def device_bytes(pid: int) -> int | None:
    """GPU memory a process holds, where nvidia-smi exists and lists it."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=5,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    total = None
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0] == str(pid):
            try:
                total = (total or 0) + int(float(parts[1]) * 1024 * 1024)
            except ValueError:
                continue
    return total
