"""Text from profiles and saved runs, made safe for a terminal: every
character a terminal could act on (escape sequences, bidi overrides) or
that renders invisibly is written as its Python escape by :func:`printable`,
visible to the reader instead of dropped."""

from __future__ import annotations

import unicodedata
from typing import TextIO

# control, format, surrogate, private-use and unassigned code points
_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Co", "Cn"})


def _escape(ch: str) -> str:
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: object, keep: str = "") -> str:
    """``text`` (any object, as its str) with every control, format and
    unassigned character escaped, except those in ``keep`` (``"\\n\\t"``
    for multi-line text such as a report)."""
    s = text if isinstance(text, str) else str(text)
    if s.isprintable():
        return s
    return "".join(_escape(ch) if ch not in keep and unicodedata.category(ch) in _HIDDEN else ch for ch in s)


# what the lab keeps of a text a server sent about itself: enough to read
MAX_SERVER_TEXT = 500


def clipped(text: object, limit: int = MAX_SERVER_TEXT) -> str:
    """``text`` made printable (:func:`printable`) and cut to about ``limit``
    characters, saying how much was left out: for text a server sent, kept
    in results, logs and reports."""
    s = text if isinstance(text, str) else str(text)
    cut = len(s) > limit
    head = printable(s[:limit])
    return f"{head}... ({len(s) - limit:,} more characters)" if cut else head


class PrintableStream:
    """A text stream that passes everything written through
    :func:`printable`, keeping newlines and tabs: for listeners that print
    run events (names, failure details) to a terminal."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def write(self, text: str) -> int:
        return self.out.write(printable(text, keep="\n\t"))

    def flush(self) -> None:
        self.out.flush()
