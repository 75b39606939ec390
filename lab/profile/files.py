"""Files a profile reads (prompt ``file``, ``[run] probe``, models and any
option marked ``model_ref``): relative to the profile's directory and inside
its tree, so a profile someone hands you cannot read whatever it likes;
``[run] allow_outside_paths`` or ``LAB_ALLOW_OUTSIDE_PATHS=1`` lifts that.
A registry reference (``tiny:llama``) is no path and passes unchanged, and
so does a hub reference (``org/repo:QUANT``) unless a path spelled the
same exists in the profile's directory."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from lab.profile.errors import KeyPath, Source, clean, shown
from lab.profile.read import Unreadable, read_text

ALLOW_ENV = "LAB_ALLOW_OUTSIDE_PATHS"
_HOW_TO_ALLOW = f"set [run] allow_outside_paths = true (or {ALLOW_ENV}=1) to allow it"


def outside_allowed(in_profile: bool) -> bool:
    return in_profile or os.environ.get(ALLOW_ENV, "") not in ("", "0")


def base_dir(profile_path: str) -> Path:
    """The directory a profile's relative paths start from."""
    return Path(profile_path).parent


def resolve(src: Source, base: Path, value: str, key: KeyPath, allow_outside: bool) -> Path:
    """The path ``value`` names, relative to ``base``, held inside it unless allowed."""
    if not value.strip():
        raise src.error(key, "the path is empty")
    if "\x00" in value:
        raise src.error(key, f"the path {shown(value)} holds a NUL character")
    given = Path(os.path.expanduser(value) if allow_outside else value)
    if given.is_absolute() and not allow_outside:
        raise src.error(key, f"{shown(value)} is an absolute path; a profile reads files inside its own directory; {_HOW_TO_ALLOW}")
    full = base / given
    if allow_outside:
        return full
    hold_inside(src, base, full, value, key)
    return full


def hold_inside(src: Source, base: Path, full: Path, value: str, key: KeyPath) -> None:
    """``full``, every symlink on the way resolved, lies inside ``base``."""
    try:
        inside = full.resolve().is_relative_to(base.resolve())
    except (OSError, RuntimeError) as exc:  # a symlink loop
        raise src.error(key, f"cannot resolve {shown(value)}: {clean(str(exc))}") from None
    if not inside:
        what = shown(value) if str(full) == str(base / value) else f"{shown(str(full))} (from {shown(value)})"
        raise src.error(key, f"{what} leads outside the profile's directory {shown(str(base.resolve()))}; {_HOW_TO_ALLOW}")


def inner(src: Source, base: Path, path: Path, name: str, value: str, key: KeyPath, allow_outside: bool) -> Path:
    """The file ``name`` inside the directory ``path`` a profile named, held
    to the profile's directory like the directory itself; ``path`` itself
    when it is no directory."""
    if not path.is_dir():
        return path
    path = path / name
    if not allow_outside:
        hold_inside(src, base, path, value, key)
    return path


def read_prompt(src: Source, base: Path, value: str, key: KeyPath, allow_outside: bool) -> str:
    path = resolve(src, base, value, key, allow_outside)
    try:
        return read_text(path, "prompt file")
    except Unreadable as exc:
        raise src.error(key, f"prompt file {shown(value)}: {exc}") from None


def check_probe(src: Source, base: Path, value: str, key: KeyPath, allow_outside: bool) -> None:
    """The probe file (or run directory holding probe.json) exists and reads
    as a probe; the report loads it again later."""
    from lab.base.probe import PROBE_FILE, Probe, ProbeError

    path = inner(src, base, resolve(src, base, value, key, allow_outside), PROBE_FILE, value, key, allow_outside)
    try:
        data: Any = json.loads(read_text(path, "probe file"))
    except Unreadable as exc:
        raise src.error(key, f"probe {shown(str(path))}: {exc}") from None
    except (ValueError, RecursionError) as exc:
        raise src.error(key, f"probe {shown(str(path))} is not valid JSON ({clean(str(exc))[:200]})") from None
    if not isinstance(data, dict):
        raise src.error(key, f"probe {shown(str(path))} is not a speclab probe")
    try:
        Probe.from_json(data, "probe")
    except (ProbeError, AttributeError) as exc:
        raise src.error(key, f"probe {shown(str(path))}: {clean(str(exc))[:200]}") from None


_REGISTRY_REF = re.compile(r"[A-Za-z][A-Za-z0-9_-]+:")


def is_registry_ref(value: str) -> bool:
    """``embedded:``, ``tiny:``, ``synthetic:`` and any namespace a plugin
    registers; a one-letter prefix (``C:``) stays a path."""
    return _REGISTRY_REF.match(value) is not None


def model_path(src: Source, base: Path, value: str, key: KeyPath, allow_outside: bool) -> str:
    """A model reference as the backends will open it: a registry reference
    unchanged, a hub reference unchanged unless the profile's directory
    holds a path spelled the same (the path wins), a path resolved from the
    profile's directory and held inside it unless allowed (the rule prompt
    files follow)."""
    from lab.kit import hub_ref

    if is_registry_ref(value):
        return value
    if hub_ref.parse(value) is not None and not (base / value).exists():
        return value
    if value.startswith("~") and not allow_outside:
        raise src.error(key, f"{shown(value)} starts with ~ (outside the profile's directory); {_HOW_TO_ALLOW}")
    return str(resolve(src, base, value, key, allow_outside))
