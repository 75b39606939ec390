"""One streamed ``/v1/completions`` request to a vLLM server: with
``return_token_ids`` a step that accepted A drafts arrives as one chunk of
A + 1 tokens, and the last chunk carries the usage and, with
``--per-request-spec-decode-metrics detailed``, the server's per-step counts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from lab.api import Cancelled
from lab.base.events import now
from lab.base.textsafe import clipped


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

    @property
    def text(self) -> str:
        return "".join(c.text for c in self.chunks)

    @property
    def ids(self) -> list[int]:
        return [i for c in self.chunks for i in c.ids]

    @property
    def spec(self) -> dict[str, Any]:
        return dict(self.metrics.get("speculative_decoding") or {})

    def per_step(self) -> list[tuple[int, int]]:
        """(drafted, accepted) per verify step, in order, as the server kept them."""
        spec = self.spec
        return list(zip(spec.get("per_step_drafted") or [], spec.get("per_step_accepted") or []))


def consume(objs: Iterable[dict[str, Any]], t_sent: float, on_chunk: Callable[[VllmChunk], None],
            cancelled: Callable[[], bool]) -> VllmStreamed:
    out = VllmStreamed(t_sent)
    finished = False
    for obj in objs:
        if "error" in obj and "choices" not in obj:
            err = obj["error"]
            raise VllmStreamError(str(err.get("message", err)) if isinstance(err, dict) else str(err))
        t = now()
        for choice in obj.get("choices") or []:
            if not isinstance(choice, dict):
                raise VllmStreamError(f"a chunk's choice is not an object: {clipped(choice, 80)}")
            finished = finished or bool(choice.get("finish_reason"))
            ids = [_token_id(x) for x in choice.get("token_ids") or []]
            text = str(choice.get("text") or "")
            if ids or text:
                chunk = VllmChunk(text, ids, t)
                out.chunks.append(chunk)
                on_chunk(chunk)
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
    return out


def _token_id(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 31:
        return value
    raise VllmStreamError(f"token_ids holds {clipped(value, 40)}, not a token id")
