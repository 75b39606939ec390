"""What a server failure is as a result: out of memory, a crash, or an error,
each with the log lines that show it."""

from __future__ import annotations

from typing import Callable

from lab.api import EngineCrashed, EngineFailure, EngineOOM
from lab.kit.server.process import ServerProcess
from lab_llamacpp_server import logparse


def exited_while_loading(server: ServerProcess, load_oom: list[str]) -> EngineFailure:
    server.wait_log_quiet()
    excerpt = server.excerpt(40)
    message = f"llama-server exited while loading (code {server.returncode()})"
    if load_oom or logparse.is_oom(excerpt):
        return EngineOOM(message + ": out of memory", excerpt)
    return EngineFailure(message, excerpt)


def request_failed(message: str, server: ServerProcess, oom_lines: Callable[[], list[str]]) -> EngineFailure:
    """A request that failed: crashed when the server is gone, out of memory
    when it said so (in the answer or in the request's log lines)."""
    # the reader may still hold the lines that explain the failure
    server.wait_log_quiet(0.5)
    if not server.alive():
        return EngineCrashed(f"llama-server exited (code {server.returncode()}): {message}", server.excerpt(40))
    oom = oom_lines()
    if "Compute error" in message or oom or logparse.is_oom(message):
        return EngineOOM(f"out of memory: {message}", "\n".join(oom[-20:]) or server.excerpt(30))
    return EngineFailure(message, server.excerpt(30))
