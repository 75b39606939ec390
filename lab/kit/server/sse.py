"""Server-sent events as a streaming completion sends them."""

from __future__ import annotations

import json
from typing import Any, Iterator


def parse_sse_lines(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """JSON objects of an SSE stream (``data: {...}`` lines)."""
    for line in lines:
        if not line:
            continue
        if line.startswith("data:"):
            payload = line[5:].strip()
            if payload == "[DONE]":
                return
            try:
                obj = json.loads(payload)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                yield obj
        elif line.startswith("error:"):
            try:
                yield {"error": json.loads(line[6:].strip())}
            except json.JSONDecodeError:
                yield {"error": {"message": line[6:].strip()}}
