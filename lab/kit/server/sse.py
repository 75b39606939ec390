"""Server-sent events as a streaming completion sends them.

A server the lab attached to may send anything, so the stream is read
within bounds: :func:`bounded_lines` checks a deadline and a stop request on
every piece the network delivers (an SSE comment such as ``: ping`` counts,
though it yields no event), and caps the length of one line and of the
whole body. Going past a bound raises :class:`StreamLimit`.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable, Iterator

from lab.api import Cancelled
from lab.base.events import now

# One llama-server chunk (text, ids, timings) is well under 2 KB; a vLLM
# final chunk with per-step metrics of a long generation a few hundred KB.
MAX_LINE_BYTES = 4 << 20
# A million streamed tokens at a few hundred bytes each.
MAX_BODY_BYTES = 512 << 20
# A request's whole stream, when its caller sets no tighter deadline.
STREAM_DEADLINE_S = 3600.0


class StreamLimit(RuntimeError):
    """A stream went past its deadline, its line cap or its body cap."""


def bounded_lines(pieces: Iterable[bytes], deadline: float | None = None,
                  stop: Callable[[], bool] | None = None,
                  max_line: int = MAX_LINE_BYTES, max_body: int = MAX_BODY_BYTES) -> Iterator[str]:
    """The lines of a byte stream (``\\n`` or ``\\r\\n``), read within bounds.

    ``deadline`` is on the :func:`lab.base.events.now` clock; ``stop`` raises
    :class:`lab.api.Cancelled` when it turns true. Both are checked on every
    piece received, whatever it holds.
    """
    buf = b""
    total = 0
    for piece in pieces:
        if stop is not None and stop():
            raise Cancelled()
        if deadline is not None and now() > deadline:
            raise StreamLimit("the stream went past its deadline (the server kept it open without finishing)")
        total += len(piece)
        if total > max_body:
            raise StreamLimit(f"the stream went past {max_body:,} bytes")
        buf += piece
        while True:
            cut = buf.find(b"\n")
            if cut < 0:
                break
            line, buf = buf[:cut], buf[cut + 1:]
            yield line.rstrip(b"\r").decode("utf-8", errors="replace")
        if len(buf) > max_line:
            raise StreamLimit(f"a line of the stream went past {max_line:,} bytes without ending")
    if buf:
        yield buf.rstrip(b"\r").decode("utf-8", errors="replace")


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
            except (ValueError, RecursionError):  # bad JSON, or an integer past the digit limit
                continue
            if isinstance(obj, dict):
                yield obj
        elif line.startswith("error:"):
            try:
                yield {"error": json.loads(line[6:].strip())}
            except (ValueError, RecursionError):  # bad JSON, or an integer past the digit limit
                yield {"error": {"message": line[6:].strip()}}
