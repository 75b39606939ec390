"""vLLM's Prometheus counters of speculative decoding, summed over their
labels (engine, model) except the draft position."""

from __future__ import annotations

import re

_SAMPLE = re.compile(r'^vllm:([A-Za-z0-9_]+?)(?:\{([^}]*)\})?\s+([-+0-9.eE]+|nan|inf)\s*$')
_POSITION = re.compile(r'position="(\d+)"')

DRAFTS = "spec_decode_num_drafts_total"
DRAFT_TOKENS = "spec_decode_num_draft_tokens_total"
ACCEPTED = "spec_decode_num_accepted_tokens_total"
PER_POS = "spec_decode_num_accepted_tokens_per_pos_total"


def parse_metrics(text: str) -> dict[str, float]:
    """``name`` (or ``name{position="i"}`` for the per-position counter) ->
    the value summed over every other label."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line.strip())
        # *_created samples are the counters' creation times, not counts
        if not m or not m.group(1).startswith("spec_decode") or m.group(1).endswith("_created"):
            continue
        name = m.group(1)
        pos = _POSITION.search(m.group(2) or "")
        key = f'{name}{{position="{pos.group(1)}"}}' if pos else name
        try:
            out[key] = out.get(key, 0.0) + float(m.group(3))
        except ValueError:
            continue
    return out


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


def per_position(d: dict[str, float]) -> list[int]:
    found = {int(m.group(1)): int(round(v)) for k, v in d.items() if k.startswith(PER_POS) and (m := _POSITION.search(k))}
    return [found[i] for i in sorted(found)]
