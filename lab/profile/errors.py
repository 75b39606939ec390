"""ProfileError and where it points: file, line, key path.

Independent problems are refused together (:class:`ProfileErrors`, filled by
:class:`Problems`); profile text echoed in a message is escaped first."""

from __future__ import annotations

import re
from typing import Any, Callable, Sequence, TypeVar

from lab.base.textsafe import printable

KeyPath = Sequence["str | int"]

# What a message quotes from a profile at most; the rest is elided.
SHOWN_CHARS = 80
# Problems a refusal prints at most (a generated profile can hold thousands).
MAX_SHOWN_PROBLEMS = 50


def clean(text: str) -> str:
    """``text`` with every character a terminal could act on written as a
    Python escape (``\\x1b``, ``\\u202e``, ``\\n``): see
    :func:`lab.base.textsafe.printable`, which the CLI uses for everything else."""
    return printable(text)


def shown(value: Any) -> str:
    """A profile value as a message quotes it: repr-like, escaped, bounded."""
    if isinstance(value, str):
        cut = value[: SHOWN_CHARS + 1]
        text = repr(cut[:SHOWN_CHARS]) + ("..." if len(cut) > SHOWN_CHARS else "")
    elif isinstance(value, (list, dict)):
        # Nested values can be deep or huge: name the size, not the contents.
        text = f"[{len(value)} items]" if isinstance(value, list) else f"{{{len(value)} keys}}"
    else:
        text = repr(value)
        if len(text) > SHOWN_CHARS:
            text = text[:SHOWN_CHARS] + "..."
    return clean(text)


def key_path(path: KeyPath) -> str:
    """``["arms", 2, "options", "n_max"]`` as ``arms[2].options.n_max``."""
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return clean(out)


class ProfileError(ValueError):
    """A profile the lab refuses: ``path:line: [key] message``."""

    def __init__(self, path: str, key: str, message: str, line: int | None = None) -> None:
        self.path = path
        self.key = key
        self.line = line
        self.message = message
        where = f"{clean(path)}:{line}" if line else clean(path)
        at = f" [{clean(key)}]" if key else ""
        super().__init__(f"{where}:{at} {clean(message)}")

    @property
    def problems(self) -> tuple[ProfileError, ...]:
        """Every problem this refusal holds, root causes first: this one alone."""
        return (self,)


class ProfileErrors(ProfileError):
    """A profile refused for several problems: the first one's file, line
    and key, and every problem, one line each, in :attr:`problems`."""

    def __init__(self, errors: Sequence[ProfileError]) -> None:
        first = errors[0]
        super().__init__(first.path, first.key, first.message, first.line)
        self._problems = tuple(errors)
        shown_lines = [str(e) for e in errors[:MAX_SHOWN_PROBLEMS]]
        if len(errors) > MAX_SHOWN_PROBLEMS:
            shown_lines.append(f"... and {len(errors) - MAX_SHOWN_PROBLEMS} more problems")
        self.args = ("\n".join(shown_lines),)

    def __str__(self) -> str:
        return str(self.args[0])

    @property
    def problems(self) -> tuple[ProfileError, ...]:
        return self._problems


T = TypeVar("T")


class Problems:
    """The problems found so far in one profile: :meth:`attempt` runs one
    independent part of the check and keeps its refusal instead of raising
    it, so the next part is checked too."""

    def __init__(self) -> None:
        self.errors: list[ProfileError] = []

    def attempt(self, check: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
        """``check(*args, **kwargs)``, or None when it refused (kept)."""
        try:
            return check(*args, **kwargs)
        except ProfileError as exc:
            seen = {str(e) for e in self.errors}
            # the arms of one sweep share their entry's problems: each said once
            self.errors.extend(e for e in exc.problems if str(e) not in seen)
            return None

    def raise_any(self) -> None:
        """Refuse the profile with every problem kept, if any."""
        if len(self.errors) == 1:
            raise self.errors[0]
        if self.errors:
            raise ProfileErrors(self.errors)


class Locator:
    """Finds the line of a key path in TOML source. tomllib keeps no
    positions, so this scans headers and ``key =`` lines; it is exact for the
    ordinary layouts profiles use and returns None when unsure."""

    _header = re.compile(r"^\s*(\[\[?)\s*([A-Za-z0-9_.\-\"' ]+?)\s*\]\]?\s*(#.*)?$")
    _key = re.compile(r"^\s*([A-Za-z0-9_\-\"']+)\s*=")

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()

    def find(self, path: KeyPath) -> int | None:
        section: list[str] = []
        counts: dict[str, int] = {}
        # Track the current table while walking the lines; match the deepest
        # table prefix of ``path``, then the key.
        want_tables, key = self._split(path)
        best: int | None = None
        table_line: int | None = None  # the key's own [table] header, if it is one
        for lineno, raw in enumerate(self.lines, start=1):
            m = self._header.match(raw)
            if m:
                name = m.group(2).replace('"', "").replace("'", "").replace(" ", "")
                parts = name.split(".")
                if m.group(1) == "[[":
                    idx = counts.get(name, -1) + 1
                    counts[name] = idx
                    section = parts[:-1] + [f"{parts[-1]}#{idx}"]
                elif len(parts) > 1 and parts[0] in counts:
                    # a sub-table of the last array element: [arms.options]
                    section = [f"{parts[0]}#{counts[parts[0]]}"] + parts[1:]
                else:
                    section = parts
                if section == want_tables and key is None:
                    return lineno
                if key is not None and section == [*want_tables, key]:
                    table_line = lineno
                continue
            if key is None:
                continue
            stripped = raw.split("#", 1)[0]
            km = self._key.match(stripped)
            if not km:
                continue
            k = km.group(1).strip("\"'")
            if section == want_tables and k == key:
                return lineno
            # inline table form: options = { n_max = 3 }
            if (
                want_tables
                and section == want_tables[:-1]
                and k == want_tables[-1]
                and re.search(rf"\b{re.escape(key)}\s*=", stripped)
            ):
                best = lineno
        if best is None:
            best = table_line
        if best is None and len(path) > 1:
            # The key is absent (a missing required key): point at what holds it.
            return self.find(list(path)[:-1])
        return best

    @staticmethod
    def _split(path: KeyPath) -> tuple[list[str], str | None]:
        tables: list[str] = []
        items = list(path)
        key: str | None = None
        i = 0
        while i < len(items):
            item = items[i]
            if i + 1 < len(items) and isinstance(items[i + 1], int):
                tables.append(f"{item}#{items[i + 1]}")
                i += 2
                continue
            if i == len(items) - 1:
                key = str(item)
            else:
                tables.append(str(item))
            i += 1
        return tables, key


class Source:
    """One profile's path and text: makes errors that point into it."""

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.text = text
        self.locator = Locator(text)

    def error(self, key: KeyPath, message: str) -> ProfileError:
        return ProfileError(self.path, key_path(key), message, self.locator.find(key))
