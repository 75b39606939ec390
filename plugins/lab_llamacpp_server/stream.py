"""Token stream of one /completion request: its tokens, the generation it
adds up to, and its steps, grouped live from the running counters every
chunk carries with ``timings_per_token``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from lab.api import Cancelled, Generation
from lab.base.events import now
from lab.base.textsafe import clipped
from lab.kit.server.claims import clock_refutes, past_limit


@dataclass
class Chunk:
    """One streamed chunk: its text, the ids it carried (the server holds a
    token back while a UTF-8 character is incomplete, so a chunk can stand for
    more tokens than it names), and the counters after it."""

    text: str
    ids: list[int]
    n_tokens: int
    predicted_n: int
    draft_n: int
    draft_n_accepted: int
    t: float  # client clock on arrival (lab.base.events.now)
    server_ms: float | None = None  # the server's generation clock: ms since its first token
    final: bool = False
    timings: dict[str, Any] = field(default_factory=dict)


@dataclass
class StreamStep:
    """A speculative step as seen in the stream."""

    drafted: int
    accepted: int
    landed: int = 0
    first_t: float = 0.0  # arrival of its first chunk
    last_t: float = 0.0
    prev_t: float = 0.0  # arrival of the chunk before it (end of the previous work)
    first_server_ms: float | None = None  # the same two instants on the server's clock
    prev_server_ms: float | None = None
    after_step: bool = False  # the work before it was a step, not plain tokens

    @property
    def complete(self) -> bool:
        """All its tokens arrived: the accepted drafts and the target's own."""
        return self.landed >= self.accepted + 1


class StepTracker:
    """Groups chunks into plain tokens and steps from the counters."""

    def __init__(self, start_t: float) -> None:
        self.draft_n = 0
        self.accepted_n = 0
        self.predicted_n = 0
        self.steps: list[StreamStep] = []
        self._left_drafted = 0  # accepted drafted tokens of the current step not yet seen
        self._step_left = 0  # tokens of the current step not yet seen
        self._in_step = False
        self._last_t = start_t
        self._last_server_ms: float | None = None
        self._last_was_step = False
        self.plain_tokens = 0

    def feed(self, chunk: Chunk) -> bool:
        """Account for a chunk; True when all its tokens were drafted."""
        if chunk.draft_n > self.draft_n:
            step = StreamStep(
                drafted=chunk.draft_n - self.draft_n,
                accepted=chunk.draft_n_accepted - self.accepted_n,
                first_t=chunk.t, prev_t=self._last_t, after_step=self._last_was_step,
                first_server_ms=chunk.server_ms, prev_server_ms=self._last_server_ms,
            )
            self.steps.append(step)
            self.draft_n = chunk.draft_n
            self.accepted_n = chunk.draft_n_accepted
            self._left_drafted = step.accepted
            self._in_step = True
            # a step of accepted A lands A drafted tokens and then one of the target's own
            self._step_left = step.accepted + 1
        n = max(chunk.n_tokens, 0)
        drafted_here = 0
        for _ in range(n):
            if self._in_step and self._step_left > 0:
                step = self.steps[-1]
                step.landed += 1
                step.last_t = chunk.t
                if self._left_drafted > 0:
                    self._left_drafted -= 1
                    drafted_here += 1
                self._step_left -= 1
                if self._step_left == 0:
                    self._in_step = False
                    self._last_was_step = True
            else:
                self.plain_tokens += 1
                self._last_was_step = False
        self.predicted_n = max(self.predicted_n, chunk.predicted_n)
        if n:
            self._last_t = chunk.t
            self._last_server_ms = chunk.server_ms
        return n > 0 and drafted_here == n


# The most tokens one chunk may stand for: a step's n_max + 1, and a few held-back ones.
MAX_CHUNK_TOKENS = 2048
# A running counter beyond this is no count of one request's tokens.
MAX_COUNT = 1 << 31


class StreamError(RuntimeError):
    """The server reported an error inside the stream, or sent a figure no
    generation can have (the message names the figure)."""


def _count(timings: dict[str, Any], key: str, default: int) -> int:
    """A running counter of ``timings``: a whole number in 0..MAX_COUNT."""
    if key not in timings:
        return default
    value = timings[key]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_COUNT:
        raise StreamError(f"the server sent timings.{key} = {clipped(value, 40)}, not a count of tokens")
    return value


def _token_id(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT:
        return value
    raise StreamError(f"the server sent a token id {clipped(value, 40)}")


def chunk_from(obj: dict[str, Any], prev_predicted: int, t: float, prev: Chunk | None = None) -> Chunk:
    """One chunk, its counters held to what a stream can say (whole numbers
    that never go down, at most MAX_CHUNK_TOKENS a chunk, no more accepted
    than drafted); a StreamError names the figure otherwise."""
    timings = obj.get("timings") or {}
    if not isinstance(timings, dict):
        raise StreamError(f"the server sent timings = {clipped(timings, 40)}, not an object")
    tokens = obj.get("tokens") or []
    if not isinstance(tokens, list) or len(tokens) > MAX_CHUNK_TOKENS:
        raise StreamError(f"the server sent {len(tokens) if isinstance(tokens, list) else clipped(tokens, 40)} "
                          f"token ids in one chunk (at most {MAX_CHUNK_TOKENS})")
    ids = [_token_id(x) for x in tokens]
    predicted = _count(timings, "predicted_n", prev_predicted + len(ids))
    if predicted < prev_predicted:
        raise StreamError(f"timings.predicted_n went down from {prev_predicted} to {predicted}")
    n = predicted - prev_predicted if timings else len(ids)
    if n > MAX_CHUNK_TOKENS:
        raise StreamError(f"timings.predicted_n jumped from {prev_predicted} to {predicted} in one chunk "
                          f"(at most {MAX_CHUNK_TOKENS} tokens a chunk)")
    draft_n = _count(timings, "draft_n", 0)
    accepted = _count(timings, "draft_n_accepted", 0)
    if accepted > draft_n:
        raise StreamError(f"timings.draft_n_accepted = {accepted} is more than timings.draft_n = {draft_n}")
    if prev is not None and "draft_n" in timings:
        if draft_n < prev.draft_n or accepted < prev.draft_n_accepted:
            raise StreamError(f"timings.draft_n / draft_n_accepted went down from {prev.draft_n} / "
                              f"{prev.draft_n_accepted} to {draft_n} / {accepted}")
        if draft_n - prev.draft_n > MAX_CHUNK_TOKENS:
            raise StreamError(f"timings.draft_n jumped from {prev.draft_n} to {draft_n} in one chunk "
                              f"(at most {MAX_CHUNK_TOKENS} drafted a step)")
    server_ms = None
    if "predicted_ms" in timings:
        raw = timings["predicted_ms"]
        server_ms = float(raw) if isinstance(raw, (int, float)) and not isinstance(raw, bool) else math.nan
        if not math.isfinite(server_ms) or server_ms < 0:
            raise StreamError(f"the server sent timings.predicted_ms = {clipped(raw, 40)}")
        if prev is not None and prev.server_ms is not None and server_ms < prev.server_ms:
            raise StreamError(f"timings.predicted_ms went down from {prev.server_ms} to {server_ms}")
    return Chunk(
        text=str(obj.get("content", "")),
        ids=ids,
        n_tokens=n,
        predicted_n=predicted,
        draft_n=draft_n,
        draft_n_accepted=accepted,
        t=t,
        server_ms=server_ms,
        final=bool(obj.get("stop", False)),
        timings=dict(timings),
    )


@dataclass
class Streamed:
    """What one streamed request delivered, on the lab's arrival clock."""

    text: str
    ids: list[int]
    final: dict[str, Any]
    t_sent: float
    first_t: float | None
    last_t: float | None
    # when the stop chunk arrived
    end_t: float | None = None

    @property
    def client_gen_s(self) -> float:
        return self.last_t - self.first_t if self.first_t is not None and self.last_t is not None else 0.0

    @property
    def client_prompt_s(self) -> float:
        return self.first_t - self.t_sent if self.first_t is not None else 0.0

    @property
    def timings(self) -> dict[str, Any]:
        """The server's own claims for the request (counts, timings), from its final chunk."""
        return dict(self.final.get("timings") or {})


Landed = Callable[[Chunk, list[int], bool], None]
"""Called for every chunk that carried tokens: the chunk, its ids (-1 for
ids the server held back) and whether all of them were accepted drafts."""


def consume(objs: Iterable[dict[str, Any]], t_sent: float, feed: Callable[[Chunk], bool],
            landed: Landed, cancelled: Callable[[], bool], limit: int | None = None) -> Streamed:
    """Read a /completion stream to its final chunk (``feed`` groups chunks
    into steps); a chunk past ``limit`` tokens is a StreamError."""
    text_parts: list[str] = []
    ids: list[int] = []
    first_t: float | None = None
    last_t: float | None = None
    final: dict[str, Any] = {}
    prev_predicted = 0
    prev: Chunk | None = None
    for obj in objs:
        if "error" in obj:
            err = obj["error"]
            # the server's own words, kept short and printable
            raise StreamError(clipped(err.get("message", err) if isinstance(err, dict) else err))
        t = now()
        chunk = chunk_from(obj, prev_predicted, t, prev)
        prev_predicted = chunk.predicted_n
        prev = chunk
        if limit is not None and chunk.predicted_n > limit:
            raise StreamError(past_limit(chunk.predicted_n, limit, "n_predict"))
        if chunk.n_tokens > 0:
            if first_t is None:
                first_t = t
            last_t = t
            all_drafted = feed(chunk)
            # ids the server held back (incomplete UTF-8) are unknown: -1
            chunk_ids = [-1] * max(chunk.n_tokens - len(chunk.ids), 0) + chunk.ids[-chunk.n_tokens:]
            ids.extend(chunk_ids)
            text_parts.append(chunk.text)
            landed(chunk, chunk_ids, all_drafted)
        elif chunk.text:
            text_parts.append(chunk.text)
        if chunk.final:
            final = obj
            break
        if cancelled():
            raise Cancelled()
    if not final:
        # closed early, an empty body: what arrived is not the generation asked for
        raise StreamError(f"the stream ended before its stop chunk, after {len(ids)} tokens (truncated)")
    return Streamed("".join(text_parts), ids, final, t_sent, first_t, last_t, now())


def check_clock(streamed: Streamed, phase_s: float, prompt_s: float) -> None:
    """StreamError naming both claims when the server's timings cannot be
    true on the lab's own clock (:func:`lab.kit.server.claims.clock_refutes`)."""
    end = streamed.end_t if streamed.end_t is not None else now()
    why = clock_refutes(phase_s, prompt_s, end - streamed.t_sent, streamed.client_gen_s)
    if why:
        raise StreamError(why)


def generation(streamed: Streamed) -> Generation:
    """The cell's generation on the server's clock (the lab's arrival clock
    holds the lab's own delays and stays a cross-check), its n - 1 timed
    tokens scaled to n: n / gen_s is predicted_per_second."""
    timings = streamed.timings
    n = len(streamed.ids)
    phase_s = float(timings["predicted_ms"]) / 1000.0 if "predicted_ms" in timings else streamed.client_gen_s
    gen_s = phase_s * n / (n - 1) if n > 1 else phase_s
    prompt_s = float(timings["prompt_ms"]) / 1000.0 if "prompt_ms" in timings else streamed.client_prompt_s
    check_clock(streamed, phase_s, prompt_s)
    gen = Generation(
        text=streamed.text, ids=list(streamed.ids),
        prompt_tokens=int(streamed.final.get("tokens_evaluated") or timings.get("prompt_n") or 0),
        prompt_s=prompt_s,
        gen_s=gen_s,
    )
    gen.engine_report["client_gen_s"] = streamed.client_gen_s
    gen.engine_report["client_prompt_s"] = streamed.client_prompt_s
    gen.engine_report["server_timings"] = timings
    return gen
