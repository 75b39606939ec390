"""Arm and prompt names: they become parts of file names (server logs, run
directories, exports), so they are held to a safe alphabet and length, and
must differ by more than case (a case-insensitive file system would merge
them)."""

from __future__ import annotations

import hashlib
import re
from typing import Any, Mapping

from lab.base.limits import MAX_NAME

_ALPHABET = re.compile(r"[A-Za-z0-9_.\-]+")
RULE = "letters, digits, '_', '.', '-'"


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name an arm or a prompt, or None."""
    if not name.strip():
        return "the name is empty"
    if len(name) > MAX_NAME:
        return f"the name is {len(name)} characters; at most {MAX_NAME}"
    if not _ALPHABET.fullmatch(name):
        return f"names use {RULE} (they become parts of file names)"
    if ".." in name:
        return "names may not contain '..' (they become parts of file names)"
    return None


def fold(name: str) -> str:
    """The form two names are compared in."""
    return name.strip().casefold()


class UniqueNames:
    """Remembers names by their folded form."""

    def __init__(self) -> None:
        self._seen: dict[str, str] = {}

    def clash(self, name: str) -> str | None:
        """The earlier name ``name`` collides with, else None (and keep it)."""
        key = fold(name)
        if key in self._seen:
            return self._seen[key]
        self._seen[key] = name
        return None


def _value_part(value: Any) -> str:
    if not isinstance(value, str):
        return str(value)
    # A swept string (a JSON object for the chat template) can hold anything:
    # keep its letters and digits, never a path.
    part = re.sub(r"\.{2,}", "_", value)
    part = re.sub(r"[^A-Za-z0-9_.\-]+", "_", part)
    part = re.sub(r"_{2,}", "_", part).strip("_.-")
    return part or "empty"


def swept_name(group: str, sweep: Mapping[str, Any]) -> str:
    """The name of one arm of a sweep: the entry's name and each swept value
    (``ng-nmax3-maxngram2``), shortened with a digest when too long."""
    if not sweep:
        return group
    name = group + "".join(f"-{k.replace('_', '')}{_value_part(v)}" for k, v in sweep.items())
    if len(name) > MAX_NAME:
        digest = hashlib.sha1(name.encode()).hexdigest()[:8]
        name = f"{name[: MAX_NAME - len(digest) - 1].rstrip('.-')}-{digest}"
    return name
