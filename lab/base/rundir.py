"""A run directory's file names, and the one way the lab reads a file it
saved there.

A reader names the plain file and gets it or ``NAME.gz``; a symlink out of
the directory is refused. JSON is read bounded (:mod:`.strictjson`) and
every failure is one :class:`JsonFileError` whose ``kind`` says which."""

from __future__ import annotations

import gzip
import io
import json
import os
import zlib
from pathlib import Path
from typing import Any

from lab.base.strictjson import BoundedNumbers, FileRefused, read_bounded

RESULTS_FILE = "results.json"
STEPS_FILE = "steps.jsonl"
PROFILE_FILE = "profile.toml"
REPORT_FILE = "report.md"
LOG_FILE = "lab.log"
PROBE_FILE = "probe.json"
ACCEPTANCE_FILE = "acceptance.json"
LOSSLESS_FILE = "lossless.json"
GZIP_SUFFIX = ".gz"
# the files the store itself writes (the rest are engine logs and later output)
STORE_FILES = frozenset({PROFILE_FILE, STEPS_FILE, RESULTS_FILE, LOG_FILE})


def located(path: str | os.PathLike[str]) -> Path:
    """``path`` itself when it exists (or neither form does), else its
    ``.gz`` twin."""
    p = Path(path)
    if p.name.endswith(GZIP_SUFFIX) or os.path.lexists(p):
        return p
    gz = p.with_name(p.name + GZIP_SUFFIX)
    return gz if os.path.lexists(gz) else p


def exists(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` or its ``.gz`` twin is there."""
    return os.path.lexists(located(path))


def is_run_dir(path: str | os.PathLike[str]) -> bool:
    """A directory holding results.json (or results.json.gz)."""
    return os.path.isdir(path) and located(Path(path) / RESULTS_FILE).is_file()


def plain_name(name: str) -> str:
    """A file's name without the ``.gz`` of a compressed one."""
    return name[: -len(GZIP_SUFFIX)] if name.endswith(GZIP_SUFFIX) else name


def run_file(run_dir: str | os.PathLike[str], name: str) -> Path:
    """``name`` in ``run_dir`` (plain or ``.gz``), refused with FileRefused
    when it resolves outside the directory (a symlink to another file)."""
    d = Path(run_dir)
    p = located(d / name)
    if os.path.lexists(p):
        inside = d.resolve()
        if not p.resolve().is_relative_to(inside):
            raise FileRefused(f"{p}: resolves outside the run directory {d}; a run's files must be its own")
    return p


def read_bytes(path: str | os.PathLike[str], cap: int, what: str = "file") -> bytes:
    """A saved file's bytes, at most ``cap``, a ``.gz`` (or the twin of a
    missing file) decompressed within it; OSError is the caller's."""
    p = located(path)
    raw = read_bounded(p, cap, what)
    if not p.name.endswith(GZIP_SUFFIX):
        return raw
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as fh:
            data = fh.read(cap + 1)
    except (EOFError, zlib.error) as exc:
        raise gzip.BadGzipFile(f"damaged gzip data ({exc})") from None
    if len(data) > cap:
        raise FileRefused(f"{p}: over {cap:,} bytes once decompressed; a {what} may be at most that")
    return data


class JsonFileError(ValueError):
    """A saved JSON file that could not be read: ``kind`` says why (one of
    the constants below), ``path`` which file, ``detail`` the reason in
    words. ``str()`` is ``"PATH: DETAIL"``."""

    MISSING = "missing"
    REFUSED = "refused"  # not a regular file, over its cap, outside its run directory
    UNREADABLE = "unreadable"
    NOT_TEXT = "not-text"
    NOT_JSON = "not-json"
    TOO_DEEP = "too-deep"

    def __init__(self, path: Path, kind: str, detail: str) -> None:
        super().__init__(f"{path}: {detail}")
        self.path = path
        self.kind = kind
        self.detail = detail


def read_json(path: str | os.PathLike[str], cap: int, what: str = "file") -> tuple[Any, list[str | int]]:
    """A saved JSON file (plain or ``.gz``) read within ``cap`` bytes, its
    numbers bounded: the value and what was read as null
    (:class:`BoundedNumbers`). Every failure is a :class:`JsonFileError`."""
    p = located(path)
    try:
        numbers = BoundedNumbers()
        value = numbers.loads(read_bytes(p, cap, what).decode("utf-8"))
    except FileNotFoundError:
        raise JsonFileError(p, JsonFileError.MISSING, "no such file") from None
    except IsADirectoryError:
        raise JsonFileError(p, JsonFileError.REFUSED, f"a directory, not a {what}") from None
    except FileRefused as exc:
        raise JsonFileError(p, JsonFileError.REFUSED, str(exc).removeprefix(f"{p}: ")) from None
    except OSError as exc:
        raise JsonFileError(p, JsonFileError.UNREADABLE,
                            f"cannot read ({exc.strerror or str(exc) or type(exc).__name__})") from None
    except UnicodeDecodeError:
        raise JsonFileError(p, JsonFileError.NOT_TEXT, f"not UTF-8 text; not a {what}") from None
    except json.JSONDecodeError as exc:
        raise JsonFileError(p, JsonFileError.NOT_JSON, f"not valid JSON ({exc.msg} at line {exc.lineno}, "
                            f"column {exc.colno}; a file cut short?)") from None
    except (ValueError, RecursionError) as exc:
        raise JsonFileError(p, JsonFileError.TOO_DEEP if isinstance(exc, RecursionError) else JsonFileError.NOT_JSON,
                            f"JSON nested too deep to be a {what}" if isinstance(exc, RecursionError)
                            else f"not a {what} ({type(exc).__name__})") from None
    return value, numbers.seen


def read_saved(path: str | os.PathLike[str], name: str, cap: int, what: str) -> tuple[Path, Any, list[str | int]]:
    """:func:`read_json` of ``path``, or of its ``name`` where ``path`` is a
    run directory: (the file read, the value, what was read as null). A
    file resolving outside the directory is a REFUSED :class:`JsonFileError`."""
    p = Path(path)
    if p.is_dir():
        inside = located(p / name)
        try:
            p = run_file(p, name)
        except FileRefused as exc:
            raise JsonFileError(inside, JsonFileError.REFUSED, str(exc).removeprefix(f"{inside}: ")) from None
    value, seen = read_json(p, cap, what)
    return p, value, seen
