"""Server-sent events as a streaming completion sends them, read within
bounds (:func:`bounded_lines`): a deadline and a stop request checked on
every piece, line and body length capped, and idle limits (the first event
within ``first_event_s``, each next within ``idle_s``; comments are no
progress). Past a bound: :class:`StreamLimit`."""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable, Iterator

from lab.api import Cancelled, Option
from lab.base.events import now

# a llama-server chunk is under 2 KB; a vLLM final chunk a few hundred KB
MAX_LINE_BYTES = 4 << 20
# A million streamed tokens at a few hundred bytes each.
MAX_BODY_BYTES = 512 << 20
# A request's whole stream, when its caller sets no tighter deadline.
STREAM_DEADLINE_S = 3600.0
# the first event follows prompt processing: as the arm's own deadline
# (lab.base.profile.Deadlines.generate), a minute; raise both for a long prompt on a slow machine
FIRST_EVENT_S = 60.0
# between events: one verify step; the slowest known (a 27B on a 24 GB Mac) took 1.44 s,
# so a minute is forty steps: past it the stream is held open by a server that has stopped
IDLE_S = 60.0

STREAM_OPTIONS: tuple[Option, ...] = (
    Option("first_token_timeout_s", float, FIRST_EVENT_S, min=0.1, max=86400, help=
           "seconds a stream may go without its first event (prompt processing) before the cell fails"),
    Option("idle_timeout_s", float, IDLE_S, min=0.1, max=86400, help=
           "seconds a stream may go without a new event once tokens flow (pings and partial lines are no progress)"),
)


class StreamLimit(RuntimeError):
    """A stream went past its deadline, its line cap or its body cap."""


def bounded_lines(pieces: Iterable[bytes], deadline: float | None = None,
                  stop: Callable[[], bool] | None = None,
                  max_line: int = MAX_LINE_BYTES, max_body: int = MAX_BODY_BYTES,
                  first_event_s: float | None = None, idle_s: float | None = None) -> Iterator[str]:
    """The lines of a byte stream (``\\n`` or ``\\r\\n``) within the module's
    bounds; ``deadline`` on the :func:`lab.base.events.now` clock, ``stop``
    raising :class:`lab.api.Cancelled`."""
    buf = b""
    total = 0
    last_event = now()
    events = 0
    for piece in pieces:
        if stop is not None and stop():
            raise Cancelled()
        t = now()
        if deadline is not None and t > deadline:
            raise StreamLimit("the stream went past its deadline (the server kept it open without finishing)")
        limit = first_event_s if events == 0 else idle_s
        if limit is not None and t - last_event > limit:
            what = "its first event" if events == 0 else "a new event"
            name = "first_token_timeout_s" if events == 0 else "idle_timeout_s"
            raise StreamLimit(f"the stream went {t - last_event:.1f} s without {what} ({name} = {limit:g}; "
                              "pings and partial lines are no progress)")
        total += len(piece)
        if total > max_body:
            raise StreamLimit(f"the stream went past {max_body:,} bytes")
        buf += piece
        while True:
            cut = buf.find(b"\n")
            if cut < 0:
                break
            line, buf = buf[:cut], buf[cut + 1:]
            if line.startswith((b"data:", b"error:")):
                events += 1
                last_event = now()
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
