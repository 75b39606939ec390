"""The front door holds: README.md stays short, every relative link in it and
in docs/ leads to a file of the repository (and a #fragment to a heading of
that page), the README's set-up and first-run commands are the ones CI runs
(.ci/run, read here) and the demo's measured first command, every docs page
is reachable from docs/index.md, and the README's ten-line plugin drafts."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from lab.cli.context import DEFAULT_PROFILE

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = sorted([README, *(ROOT / "docs").rglob("*.md")])
# [text](target) and ![alt](target); the target ends at whitespace or ")"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans are not links
    return LINK.findall(text)


def _slug(heading: str) -> str:
    """A heading's anchor as a code host renders it: lower case, punctuation
    dropped (letters, digits, ``_`` and ``-`` kept), spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {_slug(m) for m in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", text, re.M)}


def _blocks(page: Path, section: str) -> list[str]:
    """Command lines of the sh blocks under the ``## section`` heading."""
    text = page.read_text(encoding="utf-8")
    start = text.index(f"\n## {section}\n")
    end = text.find("\n## ", start + 1)
    body = text[start:end if end != -1 else None]
    lines: list[str] = []
    for block in re.findall(r"^```sh\n(.*?)^```", body, re.S | re.M):
        lines += [ln.strip() for ln in block.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return lines


def test_the_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200
    assert max(len(ln) for ln in lines) <= 200


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in _links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, mailto: ...
            continue
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists() or not dest.is_relative_to(ROOT):
            broken.append(f"{target}: no such file")
        elif fragment and dest.suffix == ".md" and fragment not in _anchors(dest):
            broken.append(f"{target}: no heading #{fragment} in {dest.relative_to(ROOT)}")
    assert broken == []


def test_the_readme_links_the_pages_a_newcomer_needs_in_its_first_screenful() -> None:
    first = "\n".join(README.read_text(encoding="utf-8").splitlines()[:40])
    for page in ("docs/quickstart.md", "docs/mac.md"):
        assert f"({page}" in first
    links = set(_links(README))
    for page in ("docs/index.md", "docs/reading-a-report.md", "docs/plugins.md", "docs/profiles.md"):
        assert page in links


def test_every_docs_page_is_linked_from_the_index() -> None:
    index = ROOT / "docs" / "index.md"
    linked = {(index.parent / t.partition("#")[0]).resolve() for t in _links(index)}
    pages = {p.resolve() for p in (ROOT / "docs").glob("*.md") if p.name != "index.md"}
    assert pages - linked == set()


def _ci_command() -> str:
    lines = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    commands = [ln for ln in lines if ln and not ln.startswith("#") and not ln.startswith(("set ", "cd "))]
    assert len(commands) == 1, commands
    return commands[0]


def _demo_command() -> str:
    """The first command as measured on a fresh machine (results/first-command-cpu)."""
    text = (ROOT / "results" / "first-command-cpu" / "README.md").read_text(encoding="utf-8")
    asks = text[text.index("**Asks**"):text.index("**Command**")]
    found = re.search(r"`([^`]+)`", asks.replace("\n", " "))
    assert found
    return found.group(1)


def test_the_readmes_commands_are_the_ones_ci_and_the_demo_run() -> None:
    shown = _blocks(README, "Set up and the first run")
    assert shown == [_demo_command(), _ci_command()]


def test_the_first_run_names_the_default_profile_and_real_extras() -> None:
    first = _demo_command()
    m = re.fullmatch(r"bash scripts/setup\.sh (\S+) && \.venv/bin/lab run (\S+)", first)
    assert m, first
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    assert set(m.group(1).split(",")) <= set(extras)
    assert m.group(2) == DEFAULT_PROFILE and (ROOT / m.group(2)).is_file()
    m = re.fullmatch(r"bash scripts/setup\.sh (\S+) && \.venv/bin/python -m pytest -q", _ci_command())
    assert m and set(m.group(1).split(",")) <= set(extras)


def test_the_quick_start_shows_the_same_two_commands() -> None:
    lines = _blocks(ROOT / "docs" / "quickstart.md", "Linux, CPU") + _blocks(ROOT / "docs" / "quickstart.md",
                                                                              "What the set-up does")
    assert _demo_command() in lines and _ci_command() in lines


def test_the_readmes_ten_line_plugin_drafts() -> None:
    from lab.kit.testing import make_drafter, run_drafter

    text = README.read_text(encoding="utf-8")
    start = text.index("\n## A plugin in ten lines\n")
    code = re.search(r"^```python\n(.*?)^```", text[start:], re.S | re.M)
    assert code
    source = code.group(1)
    assert len([ln for ln in source.splitlines() if ln.strip()]) <= 12
    space: dict[str, object] = {}
    exec(compile(source, "README.md", "exec"), space)  # the README's own example
    registered: list[type] = []
    hook = space["lab_register_drafters"]
    assert callable(hook)
    hook(registered.append)
    (cls,) = registered
    run = run_drafter(make_drafter(cls), [1, 2, 3], max_tokens=32, n_max=3)
    assert run.drafted > 0 and len(run.ids) == 32


def test_the_profiles_page_names_every_key_and_every_installed_option() -> None:
    from lab.profile.suites import SUITE_KEYS
    from lab.profile.validate import ARM_KEYS, PROFILE_KEYS, PROMPT_KEYS, RUN_TYPES
    from lab.registry import load_registry

    text = (ROOT / "docs" / "profiles.md").read_text(encoding="utf-8")
    keys = {*RUN_TYPES, *ARM_KEYS, *PROFILE_KEYS, *PROMPT_KEYS, *SUITE_KEYS}
    registry = load_registry()
    for table in (registry.backends, registry.drafters):
        for name, cls in table.items():
            assert f"#### `{name}`" in text, name
            keys |= {o.name for o in cls.options}
    assert sorted(k for k in keys if f"`{k}`" not in text) == []
