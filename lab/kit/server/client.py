"""An HTTP server's client: plain GETs and JSON POSTs answered as the server
answers, a streamed POST read line by line, and the server's own message for
an error status. What a particular server adds (llama-server's /health body,
/tokenize, /apply-template, its /metrics names) belongs to its plugin.

httpx is imported when a client is made, so importing this module stays
cheap.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator

from lab.base.events import now
from lab.base.textsafe import clipped
from lab.kit.server.sse import STREAM_DEADLINE_S, StreamLimit, bounded_lines

if TYPE_CHECKING:
    import httpx


class HttpFailure(RuntimeError):
    """The server answered a request with an error status (or, for a
    stream, anything but a success: a redirect is not followed)."""


class StreamBroken(HttpFailure):
    """A stream went past one of its bounds (:class:`lab.kit.server.sse.StreamLimit`)."""


class ServerClient:
    def __init__(self, base_url: str, headers: dict[str, str] | None = None) -> None:
        import httpx

        self.base_url = base_url
        self.headers = dict(headers or {})
        self._http = httpx.Client(base_url=base_url, headers=self.headers, timeout=httpx.Timeout(600.0, connect=5.0))

    def close(self) -> None:
        try:
            self._http.close()
        except Exception:  # noqa: BLE001 - closing on the way out of any path
            pass

    def get(self, path: str, timeout: float = 5.0) -> httpx.Response:
        """A plain GET, answered as the server answers."""
        return self._http.get(path, timeout=timeout)

    def post(self, path: str, json: dict[str, Any]) -> httpx.Response:
        """A plain JSON request (no stream), answered as the server answers."""
        return self._http.post(path, json=json)

    @contextmanager
    def completion(self, body: dict[str, Any], path: str = "/completion", deadline: float | None = None,
                   stop: Callable[[], bool] | None = None) -> Iterator[Iterator[str]]:
        """The lines of a streamed /completion (or another streamed POST:
        an OpenAI-compatible server's /v1/completions), read within bounds:
        ``deadline`` (on the :func:`lab.base.events.now` clock; default
        :data:`~lab.kit.server.sse.STREAM_DEADLINE_S` from now) and ``stop``
        are checked on every piece received, lines and the body are capped.

        Raises:
            HttpFailure: any status but 2xx (a redirect is not followed).
            StreamBroken: a bound was passed while reading.
        """
        if deadline is None:
            deadline = now() + STREAM_DEADLINE_S
        with self._http.stream("POST", path, json=body) as r:
            if not 200 <= r.status_code < 300:
                _read_capped(r)
                raise_for_status(r)
            try:
                yield bounded_lines(r.iter_bytes(), deadline, stop)
            except StreamLimit as exc:
                raise StreamBroken(str(exc)) from None


# What an error answer's body is read to, and kept of in a message.
MAX_ERROR_BYTES = 64 << 10
MAX_ERROR_CHARS = 500


def _read_capped(r: httpx.Response) -> None:
    """Read at most MAX_ERROR_BYTES of a streamed error answer, so that its
    message can be parsed (a server may send an endless error body)."""
    data = b""
    for piece in r.iter_bytes():
        data += piece
        if len(data) >= MAX_ERROR_BYTES:
            break
    r._content = data[:MAX_ERROR_BYTES]  # what .text and .json() read


def raise_for_status(r: httpx.Response) -> None:
    """HttpFailure with the server's own message for an error status."""
    if 200 <= r.status_code < 300:
        return
    try:
        message = str(r.json().get("error", {}).get("message", r.text))
    except (ValueError, AttributeError, RecursionError):
        message = r.text
    if 300 <= r.status_code < 400:
        where = r.headers.get("location")
        message = f"a redirect{f' to {where}' if where else ''}, not followed{f' ({message})' if message else ''}"
    # the server's own words, kept short and made safe for a terminal or a report
    raise HttpFailure(f"HTTP {r.status_code}: {clipped(message, MAX_ERROR_CHARS)}")
