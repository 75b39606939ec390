"""Arms that attach to a running server (``url = "http://..."``), detected
from its answers, never restarted or stopped. Only loopback unless
``allow_remote = true``; the key comes from an environment variable."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping
from urllib.parse import urlsplit

from lab.api import Option
from lab.base.textsafe import clipped

if TYPE_CHECKING:
    from lab.kit.server.client import ServerClient

LLAMA_SERVER = "llama-server"
VLLM = "vllm"
SGLANG = "sglang"
UNKNOWN = "openai-compatible"


class AttachError(ValueError):
    """A URL or key the lab refuses, or a server it cannot read."""


@dataclass(frozen=True)
class Target:
    """Where an attached arm sends its requests."""

    base_url: str
    headers: dict[str, str]
    loopback: bool


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _redacted(url: str, parts: Any) -> str:
    if not (parts.username or parts.password):
        return url
    host = parts.netloc.rsplit("@", 1)[-1]
    return parts._replace(netloc=f"***@{host}").geturl()


def check_url(url: str, allow_remote: bool = False) -> tuple[str, bool]:
    """The base URL (no trailing slash, no path) and whether it is loopback;
    AttachError for a scheme other than http(s), no host, a path, query or
    credentials, or a remote host without ``allow_remote``."""
    parts = urlsplit(url.strip())
    # a password in the URL is never repeated in a message
    url = _redacted(url.strip(), parts)
    if parts.scheme not in ("http", "https"):
        raise AttachError(f"url {url!r}: expected http:// or https://")
    if not parts.hostname:
        raise AttachError(f"url {url!r}: no host")
    if parts.username or parts.password:
        raise AttachError(f"url {url!r}: credentials do not belong in a URL; name an environment variable with api_key_env")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise AttachError(f"url {url!r}: give the server's root (scheme, host, port), without a path")
    loopback = _is_loopback(parts.hostname)
    if not loopback and not allow_remote:
        raise AttachError(
            f"url {url!r}: {parts.hostname} is not a loopback address; "
            "set allow_remote = true in the arm's options to send prompts there"
        )
    try:
        port = parts.port
    except ValueError as exc:
        raise AttachError(f"url {url!r}: {exc}") from None
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    base = f"{parts.scheme}://{host}" + (f":{port}" if port else "")
    return base, loopback


def key_problem(key: str) -> str | None:
    """Why an API key cannot go into an HTTP header, or None. Says what is
    wrong with it, never the key."""
    if not key.strip():
        return "it is empty or only whitespace"
    bad = next((i for i, ch in enumerate(key) if not 0x21 <= ord(ch) <= 0x7E), None)
    if bad is not None:
        what = "a newline" if key[bad] in "\r\n" else "a space" if key[bad] == " " else "a character no HTTP header may carry"
        return f"it holds {what} (position {bad + 1} of {len(key)})"
    return None


def auth_headers(api_key_env: str | None, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Authorization header from the variable the arm names, if any;
    AttachError when it is unset or holds a key no request could carry."""
    if not api_key_env:
        return {}
    env = os.environ if environ is None else environ
    key = env.get(api_key_env)
    if not key:
        raise AttachError(f"api_key_env = {api_key_env!r}: that environment variable is not set")
    problem = key_problem(key)
    if problem:
        raise AttachError(f"api_key_env = {api_key_env!r}: the key in that environment variable cannot be sent: {problem}")
    return {"Authorization": f"Bearer {key}"}


def refuse_key(options: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """``(option, why)`` for ``lab check``: a key the arm's variable holds
    that no request could carry. An unset variable is left to the run (the
    profile may be checked where the key is not)."""
    name = options.get("api_key_env")
    if not name or not options.get("url"):
        return None
    key = (os.environ if environ is None else environ).get(str(name))
    problem = key_problem(key) if key else None
    if problem:
        return ("api_key_env", f"the key in environment variable {name} cannot be sent: {problem}")
    return None


def target(options: dict[str, Any] | Any) -> Target:
    base, loopback = check_url(str(options.get("url")), bool(options.get("allow_remote")))
    return Target(base, auth_headers(options.get("api_key_env")), loopback)


def local_listener_pid(base_url: str) -> int | None:
    """The pid listening on ``base_url``'s port on this machine's loopback, or
    None (remote, nobody listening, or an owner this user may not see)."""
    parts = urlsplit(base_url)
    if not parts.hostname or not _is_loopback(parts.hostname):
        return None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    import psutil

    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return None
    for c in conns:
        if c.status == "LISTEN" and c.laddr and c.laddr.port == port and c.pid:
            return int(c.pid)
    return None


def detect(client: ServerClient) -> tuple[str, dict[str, Any]]:
    """The kind of server behind ``client`` and what it said about itself;
    AttachError when it refused the key."""
    import httpx

    def get(path: str) -> httpx.Response | None:
        try:
            return client.get(path)
        except httpx.HTTPError:
            return None

    props = get("/props")
    if props is not None and props.status_code in (401, 403):
        raise AttachError(f"{client.base_url} refused the request (HTTP {props.status_code}): check the key api_key_env names")
    if props is not None and props.status_code == 200:
        try:
            body = props.json()
        except ValueError:
            body = None
        if isinstance(body, dict) and ("default_generation_settings" in body or "build_info" in body):
            slots = body.get("total_slots")
            # what the server says of itself goes to lab.log and results.json: kept short and printable
            return LLAMA_SERVER, {
                "build_info": _said(body.get("build_info")),
                "model_path": _said(body.get("model_path")),
                "total_slots": slots if isinstance(slots, int) and not isinstance(slots, bool) and 0 <= slots < 1 << 20 else None,
            }
    metrics = get("/metrics")
    if metrics is not None and metrics.status_code == 200 and "vllm:" in metrics.text:
        return VLLM, {}
    info = get("/get_server_info")
    if info is not None and info.status_code == 200:
        try:
            body = info.json()
        except ValueError:
            body = None
        if isinstance(body, dict):
            return SGLANG, {"version": _said(body.get("version"))}
    return UNKNOWN, {}


def _said(value: Any) -> str | None:
    """A string the server sent about itself, capped (a 20 MB build_info
    was copied whole into lab.log and results.json)."""
    return None if value is None else clipped(value, 200)


ATTACH_OPTIONS: tuple[Option, ...] = (
    Option("url", str, None, "attach to this running server (http://127.0.0.1:PORT) instead of starting one"),
    Option("api_key_env", str, None, "environment variable holding the server's API key (never the key itself)"),
    Option("allow_remote", bool, False, "let url name a host other than loopback (prompts are sent there)"),
)
