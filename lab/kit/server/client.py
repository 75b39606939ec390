"""An HTTP server's client: GETs and JSON POSTs answered as the server
answers, a streamed POST read line by line, and the server's own message for
an error status. Every answer is read within a deadline and
:data:`MAX_ANSWER_BYTES` after decompression (gzip and deflate only)."""

from __future__ import annotations

import threading
import zlib
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator

from lab.base.events import now
from lab.base.textsafe import clipped
from lab.kit.server.sse import FIRST_EVENT_S, IDLE_S, STREAM_DEADLINE_S, StreamLimit, bounded_lines

if TYPE_CHECKING:
    import httpx


# What an error answer's body is read to, and kept of in a message.
MAX_ERROR_BYTES = 64 << 10
MAX_ERROR_CHARS = 500
# A plain answer, decompressed: /metrics of a busy server or /tokenize of a
# 32k-token prompt is a few hundred KB, /props with a long chat template a few MB.
MAX_ANSWER_BYTES = 32 << 20
# A plain POST whole (a non-streamed completion of a long generation included).
POST_DEADLINE_S = 600.0
# What one network piece may inflate to before it is handed on.
PIECE_BYTES = 1 << 16
# Servers are asked not to compress; one that does anyway is inflated within bounds.
_IDENTITY = {"Accept-Encoding": "identity"}


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
        # a stream's idle limits (lab.kit.server.sse), the arm's where it sets them
        self.first_event_s = FIRST_EVENT_S
        self.idle_s = IDLE_S
        self._http = httpx.Client(base_url=base_url, headers=self.headers, timeout=httpx.Timeout(600.0, connect=5.0))

    def close(self) -> None:
        try:
            self._http.close()
        except Exception:  # noqa: BLE001 - closing on the way out of any path
            pass

    def get(self, path: str, timeout: float = 5.0, max_bytes: int | None = None) -> httpx.Response:
        """A plain GET, whole within ``timeout`` seconds and ``max_bytes`` (default
        :data:`MAX_ANSWER_BYTES`) decompressed; httpx.TimeoutException or
        httpx.DecodingError otherwise."""
        return self._bounded("GET", path, timeout, max_bytes or MAX_ANSWER_BYTES)

    def post(self, path: str, json: dict[str, Any], timeout: float = POST_DEADLINE_S,
             max_bytes: int | None = None) -> httpx.Response:
        """A plain JSON request (no stream), answered as the server answers,
        within the same bounds as :meth:`get`."""
        return self._bounded("POST", path, timeout, max_bytes or MAX_ANSWER_BYTES, json)

    def _bounded(self, method: str, path: str, timeout: float, max_bytes: int,
                 json: dict[str, Any] | None = None) -> httpx.Response:
        import httpx

        box: dict[str, Any] = {}
        done = threading.Event()
        http = self._http

        def fetch() -> None:
            try:
                with http.stream(method, path, json=json, timeout=timeout, headers=_IDENTITY) as r:
                    r._content = read_capped(r, max_bytes, f"{method} {path}")  # noqa: SLF001 - what httpx's .text and .json() read; a capped body has no public setter
                    box["r"] = r
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread as it is
                box["exc"] = exc
            finally:
                done.set()

        # httpx bounds each read, not the answer: a dripping server is cut at the deadline
        threading.Thread(target=fetch, name=f"http {method} {path}"[:60], daemon=True).start()
        if not done.wait(timeout + 1.0):
            self._drop_connections()
            raise httpx.ReadTimeout(f"{method} {path}: no complete answer within {timeout:g} s")
        if "exc" in box:
            raise box["exc"]
        response: httpx.Response = box["r"]
        return response

    def _drop_connections(self) -> None:
        """Close every connection of this client (a request stuck on one
        ends with an error on its own thread) and go on with a new pool."""
        import httpx

        old = self._http
        self._http = httpx.Client(base_url=self.base_url, headers=self.headers, timeout=old.timeout)
        try:
            old.close()
        except Exception:  # noqa: BLE001 - a pool closed under a reader may complain; it is gone either way
            pass

    @contextmanager
    def completion(self, body: dict[str, Any], path: str = "/completion", deadline: float | None = None,
                   stop: Callable[[], bool] | None = None, first_event_s: float | None = None,
                   idle_s: float | None = None) -> Iterator[Iterator[str]]:
        """The lines of a streamed POST read within bounds
        (:func:`lab.kit.server.sse.bounded_lines`): HttpFailure for a non-2xx
        status, StreamBroken for a bound passed."""
        if deadline is None:
            deadline = now() + STREAM_DEADLINE_S
        import httpx

        first_event_s = self.first_event_s if first_event_s is None else first_event_s
        idle_s = self.idle_s if idle_s is None else idle_s
        silent = max(first_event_s, idle_s)
        timeout = httpx.Timeout(silent, connect=5.0)
        with self._http.stream("POST", path, json=body, headers=_IDENTITY, timeout=timeout) as r:
            if not 200 <= r.status_code < 300:
                _read_error(r)
                raise_for_status(r)
            try:
                yield bounded_lines(decoded_pieces(r), deadline, stop, first_event_s=first_event_s, idle_s=idle_s)
            except StreamLimit as exc:
                raise StreamBroken(str(exc)) from None




def decoded_pieces(r: httpx.Response, piece: int = PIECE_BYTES) -> Iterator[bytes]:
    """The body's bytes, inflated where it says gzip or deflate, no piece larger
    than ``piece``; httpx.DecodingError for another encoding or a bad body."""
    import httpx

    encoding = r.headers.get("content-encoding", "").strip().lower()
    if encoding in ("", "identity"):
        for raw in r.iter_raw():
            for at in range(0, len(raw), piece):
                yield raw[at:at + piece]
        return
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise httpx.DecodingError(f"the answer came in content encoding {encoding[:40]!r}, which the lab does not inflate")
    inflate = zlib.decompressobj(47)  # gzip or zlib, by the header
    try:
        for raw in r.iter_raw():
            data = raw
            while data:
                out = inflate.decompress(data, piece)
                data = inflate.unconsumed_tail
                if out:
                    yield out
    except zlib.error as exc:
        raise httpx.DecodingError(f"the {encoding} answer does not inflate ({exc})") from None


def read_capped(r: httpx.Response, max_bytes: int, what: str) -> bytes:
    """The whole body, inflated, refused past ``max_bytes``."""
    import httpx

    data = bytearray()
    for piece in decoded_pieces(r):
        data += piece
        if len(data) > max_bytes:
            raise httpx.DecodingError(f"{what}: the answer went past {max_bytes:,} bytes")
    return bytes(data)


def _read_error(r: httpx.Response) -> None:
    """Read at most MAX_ERROR_BYTES of a streamed error answer, so that its
    message can be parsed (a server may send an endless error body)."""
    data = b""
    for piece in decoded_pieces(r):
        data += piece
        if len(data) >= MAX_ERROR_BYTES:
            break
    r._content = data[:MAX_ERROR_BYTES]  # noqa: SLF001 - what httpx's .text and .json() read; a capped body has no public setter


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
