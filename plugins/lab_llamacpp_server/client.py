"""The server's HTTP side: /health read by its body, /apply-template,
/tokenize, /metrics and the streamed /completion.

httpx is imported when a client is made, so registering the plugin stays
cheap.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator

from lab_llamacpp_server.metrics import parse_metrics

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

    def healthy(self) -> bool:
        """Whether the server serves. /health answers 503 while the model
        loads and some builds answer 200 early: only the body says ready."""
        import httpx

        try:
            r = self._http.get("/health", timeout=2.0)
            body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
        except (httpx.HTTPError, ValueError):
            return False
        return r.status_code == 200 and isinstance(body, dict) and body.get("status") == "ok"

    def wait_healthy(self, alive: Callable[[], bool], timeout: float, waiting: Callable[[], None]) -> bool:
        """Poll /health until the server is ready (True) or its process
        exited (False); TimeoutError after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            if not alive():
                return False
            if self.healthy():
                return True
            if time.monotonic() > deadline:
                raise TimeoutError(f"llama-server not healthy after {timeout:.0f} s")
            waiting()
            time.sleep(0.1)

    def metrics(self) -> dict[str, float]:
        """The /metrics counters, or {} when the server does not answer."""
        import httpx

        try:
            r = self._http.get("/metrics", timeout=5.0)
            return parse_metrics(r.text) if r.status_code == 200 else {}
        except httpx.HTTPError:
            return {}

    def apply_template(self, messages: list[dict[str, str]], template_kwargs: str | None) -> str:
        """The prompt the server's own chat template renders, as a chat
        client would get it."""
        body: dict[str, Any] = {"messages": messages}
        if template_kwargs:
            body["chat_template_kwargs"] = json.loads(template_kwargs)
        r = self.post("/apply-template", json=body)
        raise_for_status(r)
        return str(r.json()["prompt"])

    def get(self, path: str, timeout: float = 5.0) -> httpx.Response:
        """A plain GET, answered as the server answers."""
        return self._http.get(path, timeout=timeout)

    def tokenize(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
        """The server's own token ids for ``text``, with the same flags the
        in-process stack tokenizes with."""
        r = self.post("/tokenize", json={"content": text, "add_special": add_special, "parse_special": parse_special})
        raise_for_status(r)
        return [int(t) for t in r.json()["tokens"]]

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
