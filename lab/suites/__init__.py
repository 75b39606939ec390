"""Prompt suites: named sets of prompts in categories, a built-in name
(``speclab``) or a path to a ``.toml`` in the lab's format or a JSON Lines
file in the shape Spec-Bench's and MT-bench's question files share."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from lab.suites.prompt import SuiteError, SuitePrompt

SUITE_DIR = Path(__file__).resolve().parent
# The file a suite directory holds its questions in (Spec-Bench, MT-bench).
QUESTION_FILE = "question.jsonl"


def builtin_suites() -> list[str]:
    """Names of the suites shipped with the lab."""
    return sorted(p.stem for p in SUITE_DIR.glob("*.toml"))


def suite_path(name_or_path: str | Path) -> Path:
    """The file a suite name or path stands for."""
    text = str(name_or_path)
    if text in builtin_suites():
        return SUITE_DIR / f"{text}.toml"
    path = Path(text).expanduser()
    if path.is_dir():
        # Spec-Bench and MT-bench keep their questions in a directory of
        # their own, as question.jsonl.
        path = path / QUESTION_FILE
    if not path.exists():
        known = ", ".join(builtin_suites()) or "none"
        raise SuiteError(f"no suite {text!r}: not a built-in suite ({known}) and no such file")
    return path


def load_suite(name_or_path: str | Path, categories: Sequence[str] | None = None) -> list[SuitePrompt]:
    """Prompts of a suite in file order, only those of ``categories`` when
    given (each of which must occur in the suite)."""
    from lab.suites.readers import read_question_jsonl, read_suite_toml

    path = suite_path(name_or_path)
    if path.suffix == ".toml":
        prompts = read_suite_toml(path)
    elif path.suffix in (".jsonl", ".json"):
        prompts = read_question_jsonl(path)
    else:
        raise SuiteError(f"{path}: unknown suite format {path.suffix!r}; use .toml or a question .jsonl")
    if categories is None:
        return prompts
    present = suite_categories(prompts)
    missing = [c for c in categories if c not in present]
    if missing:
        raise SuiteError(f"{path}: no prompts of categories {', '.join(missing)}; it has {', '.join(present)}")
    wanted = set(categories)
    return [p for p in prompts if p.category in wanted]


def suite_categories(prompts: Sequence[SuitePrompt]) -> list[str]:
    """Categories in order of first appearance."""
    return list(dict.fromkeys(p.category for p in prompts))


def per_category(prompts: Sequence[SuitePrompt], n: int) -> list[SuitePrompt]:
    """The first ``n`` prompts of every category, categories kept in order of
    first appearance (a short run that still covers every kind of text)."""
    if n < 1:
        raise ValueError("per_category must be at least 1")
    taken: dict[str, int] = {}
    out = []
    for p in prompts:
        if taken.get(p.category, 0) < n:
            taken[p.category] = taken.get(p.category, 0) + 1
            out.append(p)
    order = {c: i for i, c in enumerate(suite_categories(prompts))}
    return sorted(out, key=lambda p: order[p.category])


__all__ = [
    "QUESTION_FILE", "SuiteError", "SuitePrompt", "builtin_suites", "load_suite", "per_category", "suite_categories", "suite_path",
]
