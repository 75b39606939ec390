"""A small model hub on loopback for huggingface_hub to talk to (point
``HF_ENDPOINT`` at :attr:`TinyHub.url`): the routes its ``model_info``,
``hf_hub_download`` and ``snapshot_download`` use, serving repositories a
test writes. It logs every request, can cut a file's first download
midway (the connection closed with the body half sent), and answers
ranges, as the hub does."""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

CHUNK = 1 << 20


@dataclass
class Served:
    """One file of a repository: its bytes, or a file on disk for large ones."""

    source: bytes | Path
    size: int = 0
    sha256: str = ""
    sha1: str = ""

    def __post_init__(self) -> None:
        h256, h1 = hashlib.sha256(), hashlib.sha1()
        if isinstance(self.source, Path):
            with open(self.source, "rb") as f:
                while block := f.read(CHUNK):
                    h256.update(block)
                    h1.update(block)
            self.size = self.source.stat().st_size
        else:
            h256.update(self.source)
            h1.update(self.source)
            self.size = len(self.source)
        self.sha256, self.sha1 = h256.hexdigest(), h1.hexdigest()

    def read(self, start: int, end: int) -> Any:
        """The bytes [start, end) in chunks."""
        if isinstance(self.source, bytes):
            yield self.source[start:end]
            return
        with open(self.source, "rb") as f:
            f.seek(start)
            left = end - start
            while left > 0:
                block = f.read(min(CHUNK, left))
                if not block:
                    return
                left -= len(block)
                yield block


@dataclass
class Repo:
    files: dict[str, Served]
    commit: str = ""


@dataclass
class TinyHub:
    repos: dict[str, Repo] = field(default_factory=dict)
    # (method, path, Range header) of every request, in order
    requests: list[tuple[str, str, str]] = field(default_factory=list)
    # (repo, file) whose next download is cut midway, once each
    cut: set[tuple[str, str]] = field(default_factory=set)
    url: str = ""
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    def add(self, repo: str, files: dict[str, bytes | Path]) -> str:
        """Serve ``repo`` with ``files`` (path in the repo -> content); its commit."""
        served = {name: Served(src) for name, src in files.items()}
        digest = hashlib.sha1(json.dumps(sorted((n, s.sha256) for n, s in served.items())).encode())
        self.repos[repo] = Repo(served, digest.hexdigest())
        return self.repos[repo].commit

    def downloads(self, name: str) -> list[tuple[str, str, str]]:
        """The GET requests for the file ``name`` (of any repo)."""
        return [r for r in self.requests if r[0] == "GET" and "/resolve/" in r[1] and r[1].endswith("/" + name)]

    def start(self) -> TinyHub:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_HEAD(self) -> None:
                hub.requests.append(("HEAD", self.path, self.headers.get("Range", "")))
                self._route(body=False)

            def do_GET(self) -> None:
                hub.requests.append(("GET", self.path, self.headers.get("Range", "")))
                self._route(body=True)

            def _json(self, data: Any, status: int = 200, headers: dict[str, str] | None = None) -> None:
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(raw)

            def _missing(self, code: str, extra: dict[str, str] | None = None) -> None:
                self._json({"error": code}, 404, {"X-Error-Code": code, **(extra or {})})

            def _route(self, body: bool) -> None:
                parts = [unquote(p) for p in urlsplit(self.path).path.split("/") if p]
                if parts[:2] == ["api", "models"] and len(parts) >= 4:
                    repo = hub.repos.get(f"{parts[2]}/{parts[3]}")
                    if repo is None:
                        return self._missing("RepoNotFound")
                    rest = parts[4:]
                    if rest[:1] == ["tree"]:
                        return self._json([{"type": "file", "path": n, "size": s.size, "oid": s.sha1}
                                           for n, s in sorted(repo.files.items())])
                    if rest == [] or rest[:1] == ["revision"]:
                        return self._json({
                            "id": f"{parts[2]}/{parts[3]}", "modelId": f"{parts[2]}/{parts[3]}", "sha": repo.commit,
                            "private": False, "siblings": [{"rfilename": n, "size": s.size, "blobId": s.sha1}
                                                           for n, s in sorted(repo.files.items())]})
                    return self._missing("EntryNotFound")
                if len(parts) >= 5 and parts[2] == "resolve":
                    name = f"{parts[0]}/{parts[1]}"
                    repo = hub.repos.get(name)
                    if repo is None:
                        return self._missing("RepoNotFound")
                    path = "/".join(parts[4:])
                    served = repo.files.get(path)
                    if served is None:
                        return self._missing("EntryNotFound", {"X-Repo-Commit": repo.commit})
                    return self._file(name, path, repo.commit, served, body)
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _file(self, repo: str, path: str, commit: str, served: Served, body: bool) -> None:
                start = 0
                wanted = self.headers.get("Range", "")
                if wanted.startswith("bytes=") and wanted.endswith("-"):
                    start = int(wanted[len("bytes="):-1])
                self.send_response(206 if start else 200)
                self.send_header("X-Repo-Commit", commit)
                self.send_header("ETag", f'"{served.sha256}"')
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Length", str(served.size - start))
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{served.size - 1}/{served.size}")
                self.end_headers()
                if not body:
                    return
                stop = served.size
                if (repo, path) in hub.cut:
                    hub.cut.discard((repo, path))
                    stop = start + (served.size - start) // 2
                for block in served.read(start, stop):
                    self.wfile.write(block)
                self.wfile.flush()
                self.close_connection = True

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="tiny-hub", daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            assert self._thread is not None
            self._thread.join(timeout=10)
            self._server = None
