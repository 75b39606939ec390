"""A ``[[prompts]]`` line that names a suite (``suite = "speclab"`` or a path,
optional ``categories`` and ``per_category``) expands here into one
:class:`Prompt` per suite prompt with its category. A path is held to the
rule of a prompt ``file``; a conversation sends its first turn only."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from lab.base.limits import MAX_NAME, MAX_PROMPTS
from lab.base.profile import Prompt
from lab.profile import files
from lab.profile.errors import KeyPath, Source, clean, shown
from lab.profile.names import name_problem
from lab.profile.read import typed

SUITE_KEYS = ("suite", "categories", "per_category", "name", "system")
# Keys that mean something only on a suite line.
SUITE_ONLY_KEYS = ("categories", "per_category")


def _safe(part: str) -> str:
    """A suite's own name or category made fit for a prompt name (they become
    parts of file names): other characters become ``_``."""
    part = re.sub(r"\.{2,}", "_", part)
    part = re.sub(r"[^A-Za-z0-9_.\-]+", "_", part)
    return re.sub(r"_{2,}", "_", part).strip("_.-") or "prompt"


def _categories(src: Source, raw: Any, key: KeyPath) -> list[str] | None:
    if raw is None:
        return None
    values = raw if isinstance(raw, list) else [raw]
    if not values:
        raise src.error(key, "an empty list selects nothing; leave categories out to take them all")
    seen: set[str] = set()
    for v in values:
        typed(src, v, (str,), key)
        if not v.strip():
            raise src.error(key, "a category is an empty string")
        if v in seen:
            raise src.error(key, f"category {shown(v)} is listed twice")
        seen.add(v)
    return list(values)


def _per_category(src: Source, raw: Any, key: KeyPath) -> int | None:
    if raw is None:
        return None
    typed(src, raw, (int,), key)
    if not 1 <= raw <= MAX_PROMPTS:
        raise src.error(key, f"per_category must be at least 1 (range 1..{MAX_PROMPTS}), got {raw!r}")
    return int(raw)


def _suite_file(src: Source, value: str, key: KeyPath, allow_outside: bool) -> str | Path:
    """A built-in suite's name as given, else the path it names, resolved
    like a prompt file."""
    from lab.suites import QUESTION_FILE, builtin_suites

    if value in builtin_suites():
        return value
    base = files.base_dir(src.path)
    # A directory stands for its question.jsonl (Spec-Bench's and MT-bench's
    # layout), which is held inside the profile's directory too.
    path = files.inner(src, base, files.resolve(src, base, value, key, allow_outside), QUESTION_FILE, value, key,
                       allow_outside)
    if not path.exists():
        known = ", ".join(builtin_suites()) or "none"
        raise src.error(key, f"no suite {shown(value)}: not a built-in suite ({known}) and no such file")
    return path


def expand_suite(src: Source, t: dict[str, Any], key: KeyPath, allow_outside: bool) -> list[Prompt]:
    """The prompts a suite line stands for, in the suite's order."""
    from lab.suites import SuiteError, load_suite, per_category, suite_categories

    for k in ("text", "file"):
        if k in t:
            raise src.error([*key, k], f"a suite line takes no {k!r}; its prompts come from the suite")
    suite_key: KeyPath = [*key, "suite"]
    value = typed(src, t["suite"], (str,), suite_key)
    if not value.strip():
        raise src.error(suite_key, "the suite is empty; name a built-in suite or a file")
    wanted = _categories(src, t.get("categories"), [*key, "categories"])
    n = _per_category(src, t.get("per_category"), [*key, "per_category"])
    prefix = None
    if "name" in t:
        prefix = typed(src, t["name"], (str,), [*key, "name"])
        problem = name_problem(prefix)
        if problem:
            raise src.error([*key, "name"], f"suite prefix {shown(prefix)}: {problem}")
    system = t.get("system")
    if system is not None:
        typed(src, system, (str,), [*key, "system"])
        if "\x00" in system:
            raise src.error([*key, "system"], "the system prompt holds a NUL character")

    where = _suite_file(src, value, suite_key, allow_outside)
    try:
        prompts = load_suite(where)
    except SuiteError as exc:
        raise src.error(suite_key, f"suite {shown(value)}: {clean(str(exc))[:300]}") from None
    known = suite_categories(prompts)
    if wanted is not None:
        missing = [c for c in wanted if c not in known]
        if missing:
            raise src.error(
                [*key, "categories"],
                f"suite {shown(value)} has no categor{'y' if len(missing) == 1 else 'ies'} "
                f"{', '.join(shown(c) for c in missing)}; it has {', '.join(known)}",
            )
        prompts = [p for p in prompts if p.category in set(wanted)]
    if n is not None:
        prompts = per_category(prompts, n)

    out = []
    for p in prompts:
        name = _safe(p.name)
        if prefix:
            name = f"{prefix}.{name}"
        if len(name) > MAX_NAME:
            raise src.error(suite_key, f"suite prompt {shown(p.name)} makes a name over {MAX_NAME} characters")
        if "\x00" in p.text:
            raise src.error(suite_key, f"suite prompt {shown(p.name)} holds a NUL character")
        out.append(Prompt(name, p.text, p.system or system, category=p.category, turns=len(p.turns)))
    return out
