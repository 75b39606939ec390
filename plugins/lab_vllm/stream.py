"""One streamed ``/v1/completions`` request to a vLLM server: with
``return_token_ids`` a step that accepted A drafts arrives as one chunk of
A + 1 tokens, and the last chunk carries the usage and, with
``--per-request-spec-decode-metrics detailed``, the server's per-step counts
(with ``--enable-per-request-metrics``, its timings too), held to what the
lab sent and saw; tokens past the request's limit end the stream at once."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from lab.api import Cancelled
from lab.base.events import now
from lab.base.textsafe import clipped
from lab.kit.server.claims import clock_refutes, past_limit

# A token count beyond this is no count of one request's tokens.
MAX_COUNT = 1 << 31


class VllmStreamError(RuntimeError):
    """The server reported an error inside the stream."""


@dataclass
class VllmChunk:
    text: str
    ids: list[int]
    t: float


@dataclass
class VllmStreamed:
    t_sent: float
    chunks: list[VllmChunk] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    end_t: float | None = None

    @property
    def text(self) -> str:
        return "".join(c.text for c in self.chunks)

    @property
    def ids(self) -> list[int]:
        return [i for c in self.chunks for i in c.ids]

    @property
    def spec(self) -> dict[str, Any]:
        spec = self.metrics.get("speculative_decoding")
        return dict(spec) if isinstance(spec, dict) else {}

    def per_step(self) -> list[tuple[int, int]]:
        """(drafted, accepted) per verify step, in order, as the server kept them."""
        spec = self.spec
        return list(zip(spec.get("per_step_drafted") or [], spec.get("per_step_accepted") or []))


def consume(objs: Iterable[dict[str, Any]], t_sent: float, on_chunk: Callable[[VllmChunk], None],
            cancelled: Callable[[], bool], limit: int | None = None) -> VllmStreamed:
    """Read a /v1/completions stream to its usage chunk; a chunk that takes
    it past ``limit`` tokens is a VllmStreamError at once."""
    out = VllmStreamed(t_sent)
    finished = False
    n = 0
    for obj in objs:
        if "error" in obj and "choices" not in obj:
            err = obj["error"]
            raise VllmStreamError(clipped(err.get("message", err) if isinstance(err, dict) else err))
        t = now()
        choices = obj.get("choices") or []
        if not isinstance(choices, list):
            raise VllmStreamError(f"a chunk's choices is {clipped(choices, 40)}, not a list")
        for choice in choices:
            if not isinstance(choice, dict):
                raise VllmStreamError(f"a chunk's choice is not an object: {clipped(choice, 80)}")
            finished = finished or bool(choice.get("finish_reason"))
            raw = choice.get("token_ids") or []
            if not isinstance(raw, list):
                raise VllmStreamError(f"a chunk's token_ids is {clipped(raw, 40)}, not a list")
            text = str(choice.get("text") or "")
            # a chunk with text and no ids (a server that ignores return_token_ids) still stands for a token
            n += len(raw) or int(bool(text))
            if limit is not None and n > limit:
                raise VllmStreamError(past_limit(n, limit))
            ids = [token_id(x) for x in raw]
            if ids or text:
                chunk = VllmChunk(text, ids, t)
                out.chunks.append(chunk)
                on_chunk(chunk)
        for key in ("usage", "metrics"):
            if obj.get(key) and not isinstance(obj[key], dict):
                raise VllmStreamError(f"a chunk's {key} is {clipped(obj[key], 40)}, not an object")
        if obj.get("usage"):
            # asked for (include_usage), it comes once, after the last token
            finished = True
            out.usage = dict(obj["usage"])
        if obj.get("metrics"):
            out.metrics = dict(obj["metrics"])
        if cancelled():
            raise Cancelled()
    if not finished:
        # closed early, an empty body: what arrived is not the generation asked for
        raise VllmStreamError(f"the stream ended before its last chunk (no finish_reason, no usage) after {len(out.ids)} tokens")
    out.end_t = now()
    return out


def check_claims(streamed: VllmStreamed, prompt_tokens: int, limit: int) -> None:
    """VllmStreamError naming both claims when the server's usage cannot
    count what the lab sent (``prompt_tokens`` ids, at most ``limit`` back)
    or its timings cannot be true on the lab's own clock."""
    usage = streamed.usage
    for key in ("prompt_tokens", "completion_tokens"):
        if not _is_count(usage.get(key, 0)):
            raise VllmStreamError(f"the server sent usage.{key} = {clipped(usage[key], 40)}, not a count of tokens")
    steps = streamed.per_step()
    # each verify step lands at least one token: a longer record is no record of this stream
    if len(steps) > len(streamed.ids) or not all(_is_count(x) for step in steps for x in step):
        raise VllmStreamError(f"the server's per-step record holds {len(steps)} steps "
                              f"({clipped(steps, 80)}) for {len(streamed.ids)} tokens")
    if usage.get("completion_tokens", 0) > limit:
        raise VllmStreamError(f"the server's usage.completion_tokens = {usage['completion_tokens']} for "
                              f"max_tokens = {limit}, but {len(streamed.ids)} tokens arrived")
    if usage.get("prompt_tokens", prompt_tokens) != prompt_tokens:
        raise VllmStreamError(f"the server's usage.prompt_tokens = {usage['prompt_tokens']}, but the lab sent "
                              f"{prompt_tokens} prompt tokens")
    m = streamed.metrics
    if "generation_time_ms" not in m and "time_to_first_token_ms" not in m:
        return
    first = streamed.chunks[0].t if streamed.chunks else streamed.t_sent
    span = streamed.chunks[-1].t - first if streamed.chunks else 0.0
    end = streamed.end_t if streamed.end_t is not None else now()
    why = clock_refutes(_seconds(m, "generation_time_ms", span),
                        _seconds(m, "time_to_first_token_ms", first - streamed.t_sent), end - streamed.t_sent, span)
    if why:
        raise VllmStreamError(why)


def _seconds(metrics: dict[str, Any], key: str, default: float) -> float:
    """A ``*_ms`` figure in seconds (NaN for no number), ``default`` when absent."""
    if metrics.get(key) is None:
        return default
    raw = metrics[key]
    return float(raw) / 1000.0 if isinstance(raw, (int, float)) and not isinstance(raw, bool) else float("nan")


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < MAX_COUNT


def token_id(value: Any) -> int:
    if _is_count(value):
        return int(value)
    raise VllmStreamError(f"the server sent a token id {clipped(value, 40)}")
