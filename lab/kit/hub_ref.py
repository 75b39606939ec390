"""Hub references: a model named as the hub names it, and the files of a
repository it picks. Pure text, no network (:mod:`lab.kit.hub` fetches).

Three forms, as the engines' users already type them:

- ``org/repo:QUANT``: one GGUF of that quantization (llama.cpp's ``-hf``
  convention), its split parts (``-00001-of-00003``) with it;
- ``org/repo/path/file.gguf``: that GGUF file of the repository;
- ``org/repo``: the repository's model files as one directory (an MLX or
  safetensors model, the snapshot mlx-lm loads).

Anything else (``./x``, ``/abs``, ``~/x``, ``models/target.gguf``,
``tiny:llama``) is no hub reference. A local path that exists wins over a
reference spelled the same: the callers look on disk first."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Sequence

# A hub name (an organisation or a repository): letters, digits, '_', '.',
# '-', neither starting nor ending with '.' or '-' (the hub's own rule, which
# also forbids '--' and '..' inside).
_NAME = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
_QUANT = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?"
_WITH_QUANT = re.compile(rf"({_NAME})/({_NAME}):({_QUANT})")
_WITH_FILE = re.compile(rf"({_NAME})/({_NAME})/([^\\:\x00-\x1f]+\.gguf)", re.IGNORECASE)
_REPO = re.compile(rf"({_NAME})/({_NAME})")
# a two-part path naming a model file is a local path, never a repository
_FILE_SUFFIXES = (".gguf", ".safetensors", ".bin", ".pt", ".pth", ".npz", ".json", ".toml")
_RESEMBLES = re.compile(r"[^/:~.][^/:]*/[^/:]+(?::.*)?")
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})$", re.IGNORECASE)
_SPLIT_NAME = re.compile(r"-(\d{5})-of-(\d{5})(\.gguf)$", re.IGNORECASE)
# The files of a directory model: an engine's config, weights, tokenizer and
# chat template (mlx-lm fetches the same kinds; any *.safetensors, since a
# draft's weights need not be called model*.safetensors).
SNAPSHOT_PATTERNS = ("*.json", "*.safetensors", "*.py", "tokenizer.model", "*.tiktoken", "tiktoken.model",
                     "*.txt", "*.jsonl", "*.jinja")
LISTED = 30


@dataclass(frozen=True)
class HubRef:
    """A parsed reference: ``quant`` or ``file`` for one GGUF, neither for
    the repository's model directory."""

    text: str
    repo: str
    quant: str | None = None
    file: str | None = None


@dataclass(frozen=True)
class Choice:
    """The repository files a reference needs, and the one an engine opens
    (``""``: the directory they make)."""

    files: tuple[str, ...]
    load: str


class NoSuchFile(LookupError):
    """The repository holds nothing the reference names; the message lists
    what it does hold."""


def parse(text: str) -> HubRef | None:
    """The reference ``text`` spells, or None when it is no hub reference."""
    found = _parse(text)
    if found is None or any(bad in name for name in found.repo.split("/") for bad in ("--", "..")):
        return None
    return found


def _parse(text: str) -> HubRef | None:
    m = _WITH_QUANT.fullmatch(text)
    if m:
        return HubRef(text, f"{m[1]}/{m[2]}", quant=m[3])
    m = _WITH_FILE.fullmatch(text)
    if m:
        parts = m[3].split("/")
        return HubRef(text, f"{m[1]}/{m[2]}", file=m[3]) if all(p not in ("", ".", "..") for p in parts) else None
    m = _REPO.fullmatch(text)
    if m and not m[2].lower().endswith(_FILE_SUFFIXES):
        return HubRef(text, text)
    return None


def resembles(text: str) -> bool:
    """``text`` looks meant as a hub reference though it is none (an
    error's hint): ``org/repo:`` with no quantization, a name the hub
    refuses."""
    return (parse(text) is None and _RESEMBLES.fullmatch(text) is not None
            and not text.lower().endswith(_FILE_SUFFIXES))


def split_part(name: str) -> tuple[int, int] | None:
    """(part, of) of a split GGUF's file name (``x-00002-of-00003.gguf``)."""
    m = _SPLIT.search(PurePosixPath(name).stem)
    return (int(m[1]), int(m[2])) if m else None


def _stem(name: str) -> str:
    """A GGUF's name without directory, suffix and split part."""
    return _SPLIT.sub("", PurePosixPath(name).stem)


def part_name(name: str, i: int) -> str:
    """The name of part ``i`` of the split set ``name`` belongs to."""
    return _SPLIT_NAME.sub(lambda m: f"-{i:05d}-of-{m[2]}{m[3]}", name)


def _split_set(name: str, names: Sequence[str]) -> tuple[str, ...]:
    """Every part of the split GGUF ``name`` belongs to, in order; just
    ``name`` when it is no split part. NoSuchFile when a part is missing."""
    part = split_part(name)
    if part is None:
        return (name,)
    wanted = [part_name(name, i) for i in range(1, part[1] + 1)]
    have = set(names)
    missing = [w for w in wanted if w not in have]
    if missing:
        raise NoSuchFile(f"{name} is part of a split GGUF of {part[1]} parts, and the repository lacks "
                         f"{', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}")
    return tuple(wanted)


def _quant_matches(name: str, quant: str) -> bool:
    """The GGUF ``name`` is of quantization ``quant``: its name ends in it,
    after a separator, any case (``Qwen-UD-Q4_K_S.gguf`` is ``UD-Q4_K_S`` and
    ``Q4_K_S``)."""
    stem, q = _stem(name).lower(), quant.lower()
    if not stem.endswith(q):
        return False
    return len(stem) == len(q) or stem[-len(q) - 1] in "-._"


def _is_gguf(name: str) -> bool:
    return name.lower().endswith(".gguf")


def _projector(name: str) -> bool:
    """A vision projector (``mmproj-*.gguf``): never the model a quantization names."""
    return PurePosixPath(name).name.lower().startswith("mmproj")


def choose(ref: HubRef, listing: Sequence[tuple[str, int | None]]) -> Choice:
    """The files of ``listing`` (path, size) that ``ref`` names; NoSuchFile
    naming what the repository holds when there are none, or more than one
    file could be meant."""
    names = [n for n, _ in listing]
    if ref.file is not None:
        if ref.file not in names:
            raise NoSuchFile(f"{ref.repo} has no file {ref.file}; {holds(listing)}")
        files = _split_set(ref.file, names)
        return Choice(files, files[0])
    if ref.quant is not None:
        found = [n for n in names if _is_gguf(n) and not _projector(n) and _quant_matches(n, ref.quant)]
        if not found:
            raise NoSuchFile(f"{ref.repo} has no GGUF of quantization {ref.quant}; {holds(listing, gguf=True)}")
        # one model per split set, its first part standing for it
        models = sorted({(len(_stem(n)), _first(n)) for n in found})
        shortest = [m for m in models if m[0] == models[0][0]]
        if len(shortest) > 1:
            raise NoSuchFile(f"{ref.text} could be any of {', '.join(m[1] for m in shortest)}: name one as "
                             f"{ref.repo}/FILE.gguf")
        files = _split_set(shortest[0][1], names)
        return Choice(files, files[0])
    chosen = tuple(n for n in names if any(fnmatch.fnmatch(n, p) for p in SNAPSHOT_PATTERNS))
    has_config = "config.json" in names
    has_weights = any(n.endswith(".safetensors") for n in names)
    if has_config and has_weights:
        return Choice(chosen, "")
    ggufs = [n for n in names if _is_gguf(n) and not _projector(n)]
    if ggufs:
        raise NoSuchFile(f"{ref.repo} holds GGUF files, not a model directory (config.json and safetensors): "
                         f"name one as {ref.repo}:QUANT or {ref.repo}/FILE.gguf; {holds(listing, gguf=True)}")
    lacks = " and ".join(w for w, ok in (("config.json", has_config), ("*.safetensors", has_weights)) if not ok)
    raise NoSuchFile(f"{ref.repo} is no model directory (it lacks {lacks}); {holds(listing)}")


def _first(name: str) -> str:
    """The first part's name of the split set ``name`` belongs to."""
    return part_name(name, 1) if split_part(name) else name


def holds(listing: Sequence[tuple[str, int | None]], gguf: bool = False) -> str:
    """What a repository holds, in words: its files (its GGUF files), at most
    :data:`LISTED` of them, sizes where known."""
    shown = [(n, s) for n, s in listing if not gguf or _is_gguf(n)]
    if not shown:
        return "it holds no GGUF file" if gguf else "it holds no file"
    words = [f"{n} ({size_words(s)})" if s is not None else n for n, s in shown[:LISTED]]
    more = f" and {len(shown) - LISTED} more" if len(shown) > LISTED else ""
    return f"its {'GGUF files' if gguf else 'files'}: {', '.join(words)}{more}"


def size_words(n: int | None) -> str:
    """Bytes as the hub shows them (decimal units)."""
    if n is None:
        return "size unknown"
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"
