"""Readers for suite files: the lab's TOML format and the question files of
Spec-Bench and MT-bench (JSON Lines; ``question_id``, ``category``, ``turns``
on every line, other fields such as ``reference`` ignored)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from lab.base.strictjson import FileRefused, read_bounded
from lab.suites.prompt import SuiteError, SuitePrompt

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# Spec-Bench's question file is a few MB; a wrong path is never read whole
MAX_SUITE_BYTES = 32 * 1024 * 1024
# one prompt of a suite has a prompt file's bound (lab.profile.read.MAX_TEXT_BYTES)
MAX_PROMPT_BYTES = 4 * 1024 * 1024

_TOP_KEYS = {"suite", "prompts"}
_SUITE_KEYS = {"name", "description"}
_PROMPT_KEYS = {"name", "category", "text", "turns", "system"}


def _string(value: Any, where: str, key: str) -> str:
    """A suite's string, refused when it cannot be written out as UTF-8 (a
    lone surrogate, which JSON's ``\\ud800`` escape can make: a report would
    fail on it) or is longer than a prompt may be."""
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise SuiteError(f"{where}: {key} holds a lone surrogate (\\u{ord(value[exc.start]):04x} at character "
                         f"{exc.start}), not text") from None
    if size > MAX_PROMPT_BYTES:
        raise SuiteError(f"{where}: {key} is {size:,} bytes; a prompt may be at most {MAX_PROMPT_BYTES:,}")
    return value


def _turns(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(t, str) and t.strip() for t in value):
        raise SuiteError(f"{where}: turns must be a non-empty list of non-empty strings")
    return tuple(_string(t, where, f"turn {i + 1}") for i, t in enumerate(value))


def _read(path: Path) -> str:
    """A suite file's text, refused with a message naming it when it is not
    a regular UTF-8 file of bounded size (a FIFO would block a run forever,
    a device never end)."""
    try:
        return read_bounded(path, MAX_SUITE_BYTES, "suite file").decode("utf-8-sig")
    except FileRefused as exc:
        raise SuiteError(str(exc)) from None
    except UnicodeDecodeError as exc:
        raise SuiteError(f"{path}: not UTF-8 text (byte offset {exc.start})") from None
    except OSError as exc:
        raise SuiteError(f"{path}: cannot read: {exc.strerror or type(exc).__name__}") from None


def read_suite_toml(path: Path) -> list[SuitePrompt]:
    """The lab's format: ``[suite]`` then ``[[prompts]]`` tables with name,
    category, either text (one turn) or turns (a list), and an optional
    system message. Unknown keys are errors, as in profiles."""
    try:
        data = tomllib.loads(_read(path))
    except tomllib.TOMLDecodeError as exc:
        raise SuiteError(f"{path}: {exc}") from exc
    except RecursionError:
        raise SuiteError(f"{path}: arrays or tables nested too deeply") from None
    except ValueError as exc:  # an integer of thousands of digits
        raise SuiteError(f"{path}: not valid TOML for a suite ({str(exc)[:120]})") from None
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise SuiteError(f"{path}: unknown key(s) {', '.join(unknown)}")
    if not isinstance(data.get("suite", {}), dict):
        raise SuiteError(f"{path}: [suite] must be a table")
    entries = data.get("prompts", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise SuiteError(f"{path}: prompts must be [[prompts]] tables")
    unknown = sorted(set(data.get("suite", {})) - _SUITE_KEYS)
    if unknown:
        raise SuiteError(f"{path}: [suite] unknown key(s) {', '.join(unknown)}")
    prompts: list[SuitePrompt] = []
    seen: set[str] = set()
    for i, entry in enumerate(entries):
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
        _string(name, where, "name")
        _string(category, where, "category")
        if name in seen:
            raise SuiteError(f"{where}: prompt name {name!r} is used twice")
        seen.add(name)
        if ("text" in entry) == ("turns" in entry):
            raise SuiteError(f"{where} ({name}): give either text or turns")
        system = entry.get("system")
        if system is not None and not isinstance(system, str):
            raise SuiteError(f"{where} ({name}): system must be a string")
        if system is not None:
            _string(system, f"{where} ({name})", "system")
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
    # split on newlines only: a JSON string may hold other line separators
    for lineno, line in enumerate(_read(path).split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise SuiteError(f"{where}: not JSON: {getattr(exc, 'msg', 'nested too deeply')}") from None
        except ValueError:  # Python's bound on the digits of an integer
            raise SuiteError(f"{where}: a number too long to be one a suite holds") from None
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
        _string(category, where, "category")
        _string(qid, where, "question_id")
        system = record.get("system")
        if system is not None and not isinstance(system, str):
            raise SuiteError(f"{where}: system must be a string, got {type(system).__name__}")
        if system:
            _string(system, where, "system")
        prompts.append(SuitePrompt(
            f"{category}-{qid}", category, _turns(record["turns"], where), system or None,
        ))
    if not prompts:
        raise SuiteError(f"{path}: no questions")
    return prompts
