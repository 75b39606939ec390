"""Reading a profile: bytes to text to TOML tables, refused cleanly whatever
the input, and the typed-table helpers the validator builds on."""

from __future__ import annotations

import difflib
import os
import re
import stat
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping

from lab.profile.errors import KeyPath, ProfileError, Source, shown

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# a bound on profile and prompt files, so a wrong path is never read whole
MAX_TEXT_BYTES = 4 * 1024 * 1024


class Unreadable(Exception):
    """A text file the lab cannot use, with a message fit for a user."""


def read_text(path: Path, what: str) -> str:
    """A small UTF-8 text file's content (a leading BOM dropped)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise Unreadable("no such file") from None
    except OSError as exc:
        raise Unreadable(f"cannot read: {exc.strerror or type(exc).__name__}") from None
    except ValueError:  # a NUL in the path
        raise Unreadable("cannot read: the path holds a NUL character") from None
    if stat.S_ISDIR(st.st_mode):
        raise Unreadable(f"is a directory, not a {what}")
    if not stat.S_ISREG(st.st_mode):
        raise Unreadable(f"is not a regular file (a {what} must be one)")
    if st.st_size > MAX_TEXT_BYTES:
        raise Unreadable(f"is {st.st_size:,} bytes; a {what} may be at most {MAX_TEXT_BYTES:,}")
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_TEXT_BYTES + 1)
    except OSError as exc:
        raise Unreadable(f"cannot read: {exc.strerror or type(exc).__name__}") from None
    if len(data) > MAX_TEXT_BYTES:
        raise Unreadable(f"is over {MAX_TEXT_BYTES:,} bytes; a {what} may be at most that")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise Unreadable(f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None


def read_profile_text(path: str | os.PathLike[str]) -> str:
    """The profile file's text; ProfileError naming the file otherwise."""
    try:
        return read_text(Path(path), "profile file")
    except Unreadable as exc:
        raise Source(str(path), "").error([], str(exc)) from None


# a profile integer past 64 bits is refused before any message prints it whole
MAX_INT = 2**63 - 1


def parse_toml(src: Source) -> dict[str, Any]:
    """The profile's TOML document."""
    try:
        data = tomllib.loads(src.text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        raise _at_line(src, f"not valid TOML: {exc}", int(m.group(1)) if m else None) from None
    except RecursionError:
        raise _at_line(src, "not valid TOML for a profile: arrays or tables nested too deeply", None) from None
    except (ValueError, OverflowError, MemoryError) as exc:
        raise _at_line(src, f"not valid TOML: {type(exc).__name__}: {exc}", None) from None
    _bounded_ints(src, data, [])
    return data


def _bounded_ints(src: Source, value: Any, key: list[str | int]) -> None:
    """Every integer in the document fits in 64 bits (an iterative walk: the
    document may be nested as deep as tomllib allows)."""
    todo: list[tuple[Any, list[str | int]]] = [(value, key)]
    while todo:
        v, k = todo.pop()
        if isinstance(v, dict):
            todo.extend((item, [*k, name]) for name, item in v.items())
        elif isinstance(v, list):
            todo.extend((item, [*k, i]) for i, item in enumerate(v))
        elif isinstance(v, int) and not isinstance(v, bool) and not -MAX_INT - 1 <= v <= MAX_INT:
            raise src.error(k, f"an integer of {len(str(abs(v)))} digits is out of range (at most {MAX_INT:_})")


def _at_line(src: Source, message: str, line: int | None) -> ProfileError:
    return ProfileError(src.path, "", message, line)


def type_name(value: Any) -> str:
    names: dict[type, str] = {dict: "table", list: "array", str: "string"}
    return names.get(type(value), type(value).__name__)


def got(value: Any) -> str:
    """How a message names a value it refuses: its type, then the value
    (containers by size only: they may be deep or huge)."""
    if isinstance(value, (list, dict)):
        return f"{type_name(value)} of {len(value)}"
    return f"{type_name(value)} {shown(value)}"


def closest(word: str, options: Iterable[str]) -> str | None:
    found = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return found[0] if found else None


def table(src: Source, value: Any, key: KeyPath) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise src.error(key, f"expected a table, got {type_name(value)}")
    return value


def no_unknown(src: Source, t: Mapping[str, Any], allowed: Iterable[str], key: KeyPath) -> None:
    allowed = set(allowed)
    for k in t:
        if k not in allowed:
            hint = closest(k, allowed)
            also = f"; did you mean {hint!r}?" if hint else f"; allowed: {', '.join(sorted(allowed))}"
            raise src.error([*key, k], f"unknown key {shown(k)}{also}")


def typed(src: Source, value: Any, types: tuple[type, ...], key: KeyPath) -> Any:
    # bool is an int to Python, never to a profile
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
    if not ok:
        want = " or ".join(t.__name__ for t in types)
        raise src.error(key, f"expected {want}, got {got(value)}")
    return value
