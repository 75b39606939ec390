"""vLLM's Prometheus counters of speculative decoding, summed over their
labels (engine, model) except the draft position; a value that is no finite
number is left out, and positions past any n_max are no count."""

from __future__ import annotations

import math
import re

_SAMPLE = re.compile(r'^vllm:([A-Za-z0-9_]{1,200}?)(?:\{([^}]{0,1000})\})?\s+([-+0-9.eE]{1,40}|nan|NaN|[+-]?[Ii]nf)\s*$')
_POSITION = re.compile(r'position="(\d{1,4})"')
# a draft position past this is no draft's (lab.base.limits.N_MAX)
MAX_POSITIONS = 1024

DRAFTS = "spec_decode_num_drafts_total"
DRAFT_TOKENS = "spec_decode_num_draft_tokens_total"
ACCEPTED = "spec_decode_num_accepted_tokens_total"
PER_POS = "spec_decode_num_accepted_tokens_per_pos_total"
# what is kept: a server's other samples (*_created times among them) are no counts of this
COUNTERS = frozenset({DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POS})


def parse_metrics(text: str) -> dict[str, float]:
    """``name`` (or ``name{position="i"}`` for the per-position counter) ->
    the value summed over every other label."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line.strip())
        if not m or m.group(1) not in COUNTERS:
            continue
        name = m.group(1)
        pos = _POSITION.search(m.group(2) or "")
        if pos and int(pos.group(1)) >= MAX_POSITIONS:
            continue
        key = f'{name}{{position="{pos.group(1)}"}}' if pos else name
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        if math.isfinite(value):
            out[key] = out.get(key, 0.0) + value
    return out


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


def per_position(d: dict[str, float]) -> list[int]:
    found = {int(m.group(1)): int(round(v)) for k, v in d.items()
             if k.startswith(PER_POS) and (m := _POSITION.search(k)) and math.isfinite(v) and abs(v) < 1 << 53}
    return [found[i] for i in sorted(found)]
