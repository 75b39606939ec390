"""An HTTP server's client: plain GETs and JSON POSTs answered as the server
answers, a streamed POST read line by line, and the server's own message for
an error status. What a particular server adds (llama-server's /health body,
/tokenize, /apply-template, its /metrics names) belongs to its plugin.

httpx is imported when a client is made, so importing this module stays
cheap.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    import httpx


class HttpFailure(RuntimeError):
    """The server answered a request with an error status."""


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
    def completion(self, body: dict[str, Any], path: str = "/completion") -> Iterator[Iterator[str]]:
        """The lines of a streamed /completion (or another streamed POST:
        an OpenAI-compatible server's /v1/completions)."""
        with self._http.stream("POST", path, json=body) as r:
            if r.status_code >= 400:
                r.read()
                raise_for_status(r)
            yield r.iter_lines()


def raise_for_status(r: httpx.Response) -> None:
    """HttpFailure with the server's own message for an error status."""
    if r.status_code < 400:
        return
    try:
        message = str(r.json().get("error", {}).get("message", r.text))
    except (ValueError, AttributeError):
        message = r.text
    raise HttpFailure(f"HTTP {r.status_code}: {message}")
