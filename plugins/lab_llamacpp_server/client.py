"""llama-server's HTTP side beyond :class:`lab.kit.server.client.ServerClient`:
/health by its body, /apply-template, /tokenize and /metrics (httpx imported
when a client is made)."""

from __future__ import annotations

import json
from typing import Any, Callable

from lab.kit.server.client import ServerClient, raise_for_status
from lab.kit.server.lifecycle import poll_ready
from lab_llamacpp_server.metrics import parse_metrics

# /health is a few bytes; /metrics a few KB (a few hundred KB with many slots).
MAX_HEALTH_BYTES = 64 << 10
MAX_METRICS_BYTES = 4 << 20


class LlamaServerClient(ServerClient):
    def __init__(self, base_url: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(base_url, headers)
        # /metrics counters left out as no finite number (named once each)
        self.metrics_dropped: list[str] = []

    def healthy(self) -> bool:
        """Whether the server serves. /health answers 503 while the model
        loads and some builds answer 200 early: only the body says ready."""
        import httpx

        try:
            r = self.get("/health", timeout=2.0, max_bytes=MAX_HEALTH_BYTES)
            body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
        except (httpx.HTTPError, ValueError):
            return False
        return r.status_code == 200 and isinstance(body, dict) and body.get("status") == "ok"

    def wait_healthy(self, alive: Callable[[], bool], timeout: float, waiting: Callable[[], None]) -> bool:
        """Poll /health until the server is ready (True) or its process
        exited (False); TimeoutError after ``timeout`` seconds."""
        return poll_ready(self.healthy, alive, timeout, 0.1, "llama-server not healthy", waiting)

    def metrics(self) -> dict[str, float]:
        """The /metrics counters, or {} when the server does not answer (or
        answers past its bounds). Counters that are no finite number are
        left out and named in :attr:`metrics_dropped`."""
        import httpx

        try:
            r = self.get("/metrics", timeout=5.0, max_bytes=MAX_METRICS_BYTES)
            return parse_metrics(r.text, self.metrics_dropped) if r.status_code == 200 else {}
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

    def tokenize(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
        """The server's own token ids for ``text``, with the same flags the
        in-process stack tokenizes with."""
        r = self.post("/tokenize", json={"content": text, "add_special": add_special, "parse_special": parse_special})
        raise_for_status(r)
        return [int(t) for t in r.json()["tokens"]]
