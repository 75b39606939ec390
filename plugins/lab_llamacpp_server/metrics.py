"""The server's Prometheus ``/metrics`` text, and device memory from nvidia-smi."""

from __future__ import annotations

import re
import shutil
import subprocess

_SAMPLE = re.compile(r'^llamacpp:([A-Za-z0-9_]+)(?:\{([^}]*)\})?\s+([-+0-9.eE]+|nan|inf)\s*$')


def parse_metrics(text: str) -> dict[str, float]:
    """Flat map: ``name`` or ``name{label="v"}`` -> value."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line.strip())
        if not m:
            continue
        key = m.group(1) + (f"{{{m.group(2)}}}" if m.group(2) else "")
        try:
            out[key] = float(m.group(3))
        except ValueError:
            continue
    return out


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
        if key in SPEC_COUNTERS or key.startswith("spec_decode_num_accepted_tokens_per_pos_total"):
            out[key] = value - before.get(key, 0.0)
    return out


def per_position(delta: dict[str, float]) -> list[int]:
    """Accepted tokens per draft position, in position order."""
    found: dict[int, int] = {}
    for key, value in delta.items():
        if key.startswith("spec_decode_num_accepted_tokens_per_pos_total{"):
            m = re.search(r'(?:pos|position)="?(\d+)"?', key)
            if m:
                found[int(m.group(1))] = int(round(value))
    return [found[i] for i in sorted(found)]


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
