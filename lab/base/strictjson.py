"""JSON as every file the lab saves holds it: strict, with a non-finite
figure saved as null (JSON has no NaN; most readers refuse Python's)."""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from typing import Any, Mapping


def strict_json(value: Any) -> Any:
    """``value`` with every NaN and infinity replaced by None, recursively
    through mappings, lists and tuples."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value


def dumps(value: Any, **kw: Any) -> str:
    """Strict JSON text (see :func:`strict_json`); anything not JSON becomes
    its str."""
    kw.setdefault("default", str)
    try:
        # the common case has no non-finite number: no copy of the data
        return json.dumps(value, allow_nan=False, **kw)
    except ValueError:
        return json.dumps(strict_json(value), allow_nan=False, **kw)


# -- reading ------------------------------------------------------------------

# longer integers are no figure the lab saves (20 digits at most) and read as null
MAX_INT_DIGITS = 40


class FileRefused(ValueError):
    """A file the lab will not read: not a regular file, or over its size
    cap. The message names the path and why."""


def read_bounded(path: str | os.PathLike[str], cap: int, what: str = "file") -> bytes:
    """A regular file's bytes, at most ``cap``, checked through the open
    descriptor so a FIFO, device or socket (swapped in or symlinked) is refused
    rather than read; OSError is left to the caller."""
    # POSIX flags, as the store's own reads (os.pread) are POSIX
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(st.st_mode):
            raise FileRefused(f"{path}: not a regular file (a {what} must be one)")
        if st.st_size > cap:
            raise FileRefused(f"{path}: {st.st_size:,} bytes; a {what} may be at most {cap:,}")
        chunks: list[bytes] = []
        left = cap + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > cap:
        raise FileRefused(f"{path}: over {cap:,} bytes; a {what} may be at most that")
    return data


class BoundedNumbers:
    """``json.loads`` hooks that read NaN, Infinity, overflowing floats and
    integers past MAX_INT_DIGITS as null, noting each in ``seen``."""

    def __init__(self, seen: list[str | int] | None = None, lineno: int | None = None) -> None:
        self.seen = seen if seen is not None else []
        self.lineno = lineno

    def _note(self, what: str) -> None:
        self.seen.append(what if self.lineno is None else self.lineno)

    def constant(self, name: str) -> None:
        self._note(name)

    def float(self, text: str) -> float | None:
        value = float(text)
        if math.isfinite(value):
            return value
        self._note("a float beyond range")
        return None

    def int(self, text: str) -> int | None:
        if len(text.lstrip("-")) > MAX_INT_DIGITS:
            self._note(f"an integer of over {MAX_INT_DIGITS} digits")
            return None
        return int(text)

    def loads(self, text: str | bytes) -> Any:
        return json.loads(text, parse_constant=self.constant, parse_float=self.float, parse_int=self.int)
