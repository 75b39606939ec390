"""The shape a saved run must have before anything renders it: what
:func:`lab.store.load_run` reads is kept where it has the expected shape and
left out or nulled where not, each omission one line of ``problems``, so a
damaged file gives a partial report that says what it could not use."""

from __future__ import annotations

import math
from typing import Any

from lab.base.cells import Status
from lab.base.events import STEP_COUNT_KEYS, STEP_SECONDS_KEYS
from lab.base.row import field_kinds

# The keys a row needs to be placed at all: which cell it is, and how it went.
_STATUSES = frozenset(s.value for s in Status)
# Types of the row keys the lab itself saves, read off the row's fields; a
# value of another type is read as null (or the key's empty default) and named.
_KINDS = field_kinds()
_INTS = tuple(k for k, kind in _KINDS.items() if kind == "count")
_FLOATS = tuple(k for k, kind in _KINDS.items() if kind == "number")
_TEXTS_OR_NULL = tuple(k for k, kind in _KINDS.items() if kind == "text?")
_TEXTS = tuple(k for k, kind in _KINDS.items() if kind == "text")
_BOOLS_OR_NULL = tuple(k for k, kind in _KINDS.items() if kind == "flag?")
_BOOLS = tuple(k for k, kind in _KINDS.items() if kind == "flag")
_TABLES = tuple(k for k, kind in _KINDS.items() if kind == "table")
_TEXT_NEEDED = ("arm", "prompt")

# Lines of problems a reader is shown at most; the rest are counted.
MAX_PROBLEMS = 20


class Problems(list[str]):
    """What could not be used, one line each, in reading order."""

    def add(self, where: str, what: str) -> None:
        self.append(f"{where}: {what}")

    def lines(self) -> list[str]:
        if len(self) <= MAX_PROBLEMS:
            return list(self)
        return self[:MAX_PROBLEMS] + [f"... and {len(self) - MAX_PROBLEMS} more"]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_count(v: Any) -> bool:
    return _is_int(v) and v >= 0


def _is_number(v: Any) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(v)


def _kind(v: Any) -> str:
    return "null" if v is None else {dict: "object", list: "list", str: "text", bool: "true/false"}.get(type(v), type(v).__name__)


def check_run(data: Any, source: str) -> tuple[dict[str, Any], Problems]:
    """``data`` as read from ``source`` (a results.json), reduced to the
    shape the lab saves, and what was left out."""
    problems = Problems()
    if not isinstance(data, dict):
        raise ValueError(f"{source}: not a speclab results file (a JSON {_kind(data)}, not an object)")
    if "results" not in data and "profile" not in data:
        raise ValueError(f"{source}: not a speclab results file (needs 'profile' and 'results')")
    out: dict[str, Any] = dict(data)
    out["profile"] = _profile(data.get("profile"), source, problems)
    raw = data.get("results")
    rows: list[dict[str, Any]] = []
    if not isinstance(raw, list):
        problems.add(source, f"'results' is {_kind(raw)}, not a list of rows; no rows to show")
    else:
        for i, r in enumerate(raw):
            row = check_row(r, f"{source}: results[{i}]", problems)
            if row is not None:
                rows.append(row)
    out["results"] = rows
    for key in ("started", "finished"):
        if key in out and not (out[key] is None or isinstance(out[key], str)):
            problems.add(source, f"{key!r} is {_kind(out[key])}, not a time; ignored")
            out[key] = None
    if not isinstance(out.get("cancelled", False), bool):
        problems.add(source, "'cancelled' is not true/false; read as false")
        out["cancelled"] = False
    for key in ("arm_reports", "machine"):
        if key in out and not isinstance(out[key], dict):
            problems.add(source, f"{key!r} is {_kind(out[key])}, not an object; ignored")
            out[key] = {}
    if isinstance(out.get("arm_reports"), dict):
        out["arm_reports"] = {str(k): v for k, v in out["arm_reports"].items() if isinstance(v, dict)}
    return out, problems


def _profile(raw: Any, source: str, problems: Problems) -> dict[str, Any]:
    where = f"{source}: profile"
    if not isinstance(raw, dict):
        problems.add(where, f"is {_kind(raw)}, not an object; the run's settings are unknown")
        raw = {}
    p = dict(raw)
    if not isinstance(p.get("name"), str) or not p.get("name"):
        problems.add(where, "has no name; shown as '(unnamed run)'")
        p["name"] = "(unnamed run)"
    if "description" in p and not isinstance(p["description"], str):
        problems.add(where, "description is not text; left out")
        p.pop("description")
    if not isinstance(p.get("run", {}), dict):
        problems.add(where, f"'run' is {_kind(p.get('run'))}, not an object; settings unknown")
        p["run"] = {}
    run = dict(p.get("run") or {})
    # a probe named by the run is a file the report reads: only a path or a switch
    if "probe" in run and not isinstance(run["probe"], (str, bool, type(None))):
        problems.add(where, "run.probe is neither a path nor true/false; ignored")
        run.pop("probe")
    if "probe" in p and not isinstance(p["probe"], (str, type(None))):
        p.pop("probe")
    for key, value in list(run.items()):
        if isinstance(value, (dict, list)):
            run.pop(key)
            problems.add(where, f"run.{key} is {_kind(value)}; ignored")
    p["run"] = run
    for key in ("prompts", "arms"):
        items = p.get(key, [])
        if not isinstance(items, list) or not all(isinstance(x, dict) for x in items):
            problems.add(where, f"{key!r} is not a list of objects; ignored")
            p[key] = [x for x in items if isinstance(x, dict)] if isinstance(items, list) else []
    return p


def check_row(raw: Any, where: str, problems: Problems) -> dict[str, Any] | None:
    """One saved row in the shape :class:`lab.rows.build.ResultRow` saves, or
    None when it cannot be placed (no arm, prompt, round or status)."""
    if not isinstance(raw, dict):
        problems.add(where, f"is {_kind(raw)}, not a row; left out")
        return None
    for key in _TEXT_NEEDED:
        if not isinstance(raw.get(key), str) or not raw.get(key):
            problems.add(where, f"no {key} (it is {_kind(raw.get(key))}); row left out")
            return None
    if not _is_int(raw.get("round")) or raw["round"] < 0:
        problems.add(where, f"round is {_kind(raw.get('round'))}, not a round number; row left out")
        return None
    if raw.get("status") not in _STATUSES:
        problems.add(where, f"status {str(raw.get('status'))[:40]!r} is not one the lab saves; row left out")
        return None
    row = dict(raw)
    bad: list[str] = []

    def reset(key: str, value: Any) -> None:
        if key in raw:
            bad.append(key)
        row[key] = value

    for key in _INTS:
        v = row.get(key)
        if v is not None and not (_is_int(v) and v >= 0):
            reset(key, None)
    for key in _FLOATS:
        v = row.get(key)
        if v is not None and not (_is_number(v) and v >= 0):
            reset(key, None)
    for key in _TEXTS_OR_NULL:
        if row.get(key) is not None and not isinstance(row[key], str):
            reset(key, None)
    for key in _TEXTS:
        if not isinstance(row.get(key, ""), str) or row.get(key) is None:
            reset(key, "")
        row.setdefault(key, "")
    for key in _BOOLS_OR_NULL:
        if row.get(key) is not None and not isinstance(row[key], bool):
            reset(key, None)
    for key in _BOOLS:
        if not isinstance(row.get(key, False), bool):
            reset(key, False)
    for key in _TABLES:
        if not isinstance(row.get(key, {}), dict):
            reset(key, {})
    origin = row.get("text_origin")
    if origin is not None and not (
        isinstance(origin, list) and all(isinstance(x, list) and len(x) == 2 and all(_is_int(n) for n in x) for x in origin)
    ):
        reset("text_origin", None)
    for key in (*_INTS, *_FLOATS, *_TEXTS_OR_NULL, *_BOOLS_OR_NULL, "text_origin"):
        row.setdefault(key, None)
    for key in _BOOLS:
        row.setdefault(key, False)
    for key in _TABLES:
        row.setdefault(key, {})
    if bad:
        problems.add(where, f"{', '.join(bad)} of the wrong type or out of range; read as empty")
    return row


def check_step(raw: Any) -> str | None:
    """Why one steps.jsonl record cannot be used, or None."""
    if not isinstance(raw, dict):
        return f"is {_kind(raw)}, not a step"
    for key in ("arm", "prompt"):
        if not isinstance(raw.get(key), str):
            return f"no {key}"
    if not _is_int(raw.get("round")):
        return "no round"
    for key in STEP_COUNT_KEYS:
        v = raw.get(key)
        if key in raw and not _is_count(v):
            return f"{key} is not a count"
    for key in ("drafted", "accepted"):
        if key not in raw:
            return f"no {key}"
    if raw["accepted"] > raw["drafted"]:
        return "more accepted than drafted"
    for key in STEP_SECONDS_KEYS:
        v = raw.get(key)
        if v is not None and not (_is_number(v) and v >= 0):
            return f"{key} is not a duration"
    return None


def unreadable_lines(data: Any) -> list[str]:
    """A report's note of what it could not use (Markdown), or nothing."""
    found = data.get("unreadable") if isinstance(data, dict) else None
    if not found:
        return []
    problems = Problems(found)
    return ["**Not all of this run could be read**; left out:", ""] + [f"- {p}" for p in problems.lines()] + [""]
