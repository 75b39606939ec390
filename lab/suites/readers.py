"""Readers for suite files: the lab's TOML format and the question files of
Spec-Bench and MT-bench (JSON Lines; ``question_id``, ``category``, ``turns``
on every line, other fields such as ``reference`` ignored)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from lab.suites import SuiteError, SuitePrompt

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

_TOP_KEYS = {"suite", "prompts"}
_SUITE_KEYS = {"name", "description"}
_PROMPT_KEYS = {"name", "category", "text", "turns", "system"}


def _turns(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(t, str) and t.strip() for t in value):
        raise SuiteError(f"{where}: turns must be a non-empty list of non-empty strings")
    return tuple(value)


def read_suite_toml(path: Path) -> list[SuitePrompt]:
    """The lab's format: ``[suite]`` then ``[[prompts]]`` tables with name,
    category, either text (one turn) or turns (a list), and an optional
    system message. Unknown keys are errors, as in profiles."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise SuiteError(f"{path}: {exc}") from exc
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise SuiteError(f"{path}: unknown key(s) {', '.join(unknown)}")
    unknown = sorted(set(data.get("suite", {})) - _SUITE_KEYS)
    if unknown:
        raise SuiteError(f"{path}: [suite] unknown key(s) {', '.join(unknown)}")
    prompts: list[SuitePrompt] = []
    seen: set[str] = set()
    for i, entry in enumerate(data.get("prompts", [])):
        where = f"{path}: prompts[{i}]"
        unknown = sorted(set(entry) - _PROMPT_KEYS)
        if unknown:
            raise SuiteError(f"{where}: unknown key(s) {', '.join(unknown)}")
        name = entry.get("name")
        category = entry.get("category")
        if not isinstance(name, str) or not name:
            raise SuiteError(f"{where}: needs a name")
        if not isinstance(category, str) or not category:
            raise SuiteError(f"{where} ({name}): needs a category")
        if name in seen:
            raise SuiteError(f"{where}: prompt name {name!r} is used twice")
        seen.add(name)
        if ("text" in entry) == ("turns" in entry):
            raise SuiteError(f"{where} ({name}): give either text or turns")
        system = entry.get("system")
        if system is not None and not isinstance(system, str):
            raise SuiteError(f"{where} ({name}): system must be a string")
        turns = _turns(entry.get("turns", entry.get("text")), f"{where} ({name})")
        prompts.append(SuitePrompt(name, category, turns, system))
    if not prompts:
        raise SuiteError(f"{path}: no [[prompts]]")
    return prompts


def read_question_jsonl(path: Path) -> list[SuitePrompt]:
    """One question per line. Prompt names are ``<category>-<question_id>``
    so a report reads by category; ids must be unique in the file."""
    prompts: list[SuitePrompt] = []
    seen: set[str] = set()
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SuiteError(f"{where}: not JSON: {exc.msg}") from exc
            if not isinstance(record, dict):
                raise SuiteError(f"{where}: a question must be a JSON object")
            missing = [k for k in ("question_id", "category", "turns") if k not in record]
            if missing:
                raise SuiteError(f"{where}: missing {', '.join(missing)}")
            qid = str(record["question_id"])
            if qid in seen:
                raise SuiteError(f"{where}: question_id {qid} is used twice")
            seen.add(qid)
            category = record["category"]
            if not isinstance(category, str) or not category:
                raise SuiteError(f"{where}: category must be a non-empty string")
            system = record.get("system")
            prompts.append(SuitePrompt(
                f"{category}-{qid}", category, _turns(record["turns"], where),
                system if isinstance(system, str) and system else None,
            ))
    if not prompts:
        raise SuiteError(f"{path}: no questions")
    return prompts
