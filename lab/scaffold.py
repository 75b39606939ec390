"""`lab new-drafter NAME [--dir DIR]`: write a complete, minimal drafter
plugin package a user installs and runs at once, then edits: its unit
test drives ``draft()`` against the lab's fake target
(:mod:`lab.kit.testing`).

The package: pyproject.toml with the ``lab.drafters`` entry point, a working
prompt-lookup Drafter with one option, a profile against its baseline on the
embedded model, and a README."""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

# Matched whole (fullmatch): ``$`` would also match before a trailing newline.
NAME_RE = re.compile(r"[a-z][a-z0-9_-]{0,39}")

PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "0.1.0"
description = "A drafter plugin for speclab: {name}"
requires-python = ">=3.10"
# speclab itself is installed already where the lab runs; list it here if
# you publish the package.
dependencies = []

# The one line the lab looks for: drafter plugins register under the
# lab.drafters group; the value is the module that implements the hook.
[project.entry-points."lab.drafters"]
{name} = "{module}"

[tool.setuptools]
py-modules = ["{module}"]
"""

MODULE = '''\
"""{cls}: a drafter plugin for speclab ({name}).

Prompt lookup of the newest token: find where the context's last token
appeared before (within the last ``window`` tokens) and propose the tokens
that followed it. Replace ``draft`` with your own idea; keep its contract.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from lab.api import Draft, Drafter, DrafterContext, Option
from lab.base.events import Cell
from lab.hookspecs import hookimpl


class {cls}(Drafter):
    name = "{name}"
    description = "proposes what followed the newest token's previous occurrence"
    # Options are checked by the profile before anything loads (type and
    # range); a profile sets them under drafter_options = {{ window = 512 }}
    # and sweeps them with a list.
    options = (Option("window", int, 256, "how many recent tokens to search", min=2, max=1_000_000),)
    # None: any stack whose backend runs drafter plugins (lab plugins lists them).
    stacks = None
    # True only if draft() replays a baseline arm's output (ctx.reference).
    needs_baseline = False

    def __init__(self, options: Mapping[str, Any], ctx: DrafterContext) -> None:
        super().__init__(options, ctx)
        # self.opts holds every declared option: the profile's value, else its default
        self.window = int(self.opts["window"])

    def begin(self, prompt_ids: Sequence[int], cell: Cell) -> None:
        """A new generation (one arm x prompt x round) starts: reset any state."""

    def draft(self, context: Sequence[int], k: int) -> Draft:
        """Up to ``k`` (the arm's n_max) tokens that continue ``context`` (the
        prompt and every token generated so far; the last is the target's
        newest). Fewer, or none, is fine: an empty draft costs one plain step."""
        last = context[-1]
        start = max(0, len(context) - self.window)
        for i in range(len(context) - 2, start - 1, -1):
            if context[i] == last:
                return Draft(tuple(context[i + 1:i + 1 + k]))
        return Draft(())


@hookimpl
def lab_register_drafters(register: Any) -> None:
    register({cls})
'''

TEST = '''\
"""Unit tests for {cls}, against the lab's fake target (no model needed).
From the package directory: {pytest} -q
(pytest missing? {pip} install pytest)"""

from __future__ import annotations

from lab.kit.testing import FakeTarget, make_drafter, run_drafter

from {module} import {cls}


def test_it_learns_a_repeating_text() -> None:
    # FakeTarget's greedy next token is the one after the context's last in
    # its pattern (2..11, cyclic): a prompt holding the cycle can be fully accepted
    target = FakeTarget()
    drafter = make_drafter({cls}, {{"window": 64}}, target)
    run = run_drafter(drafter, list(target.pattern) * 2, max_tokens=48, n_max=4, target=target)
    assert len(run.ids) == 48
    # the cycle is in the prompt already: every proposal is the target's own
    assert run.drafted > 0 and run.acceptance == 1.0


def test_options_left_out_take_their_declared_default() -> None:
    drafter = make_drafter({cls})
    assert drafter.opts["window"] == 256
'''

PROFILE = """\
# {lab} run {name}.toml   (after {pip} install -e .)
[profile]
name = "{name}"
description = "baseline vs the {name} drafter on the embedded SmolLM2"

[run]
max_tokens = 200
rounds = 2

[[prompts]]
name = "code"
text = "Write a Python class LRUCache with get and put methods."

[[arms]]
name = "baseline"
backend = "llamacpp"
model = "embedded:smollm2"

[[arms]]
name = "{name}"
backend = "llamacpp"
model = "embedded:smollm2"
drafter = "{name}"
n_max = [2, 4]
drafter_options = {{ window = 256 }}
"""

README = """\
# {dist}

A drafter plugin for speclab. Install it into the environment the lab runs
in, check the lab sees it, and run it against its baseline:

From this directory:

```sh
{pip} install -e .
{lab} plugins     # lists {name} and the backends that run it
{lab} run {name}.toml     # baseline vs {name} at n_max 2 and 4
{lab} lossless -d {name}     # at temperature > 0: does it keep the target's distribution?
{pip} install pytest     # once: the lab's set-up installs pytest only with its test extra
{pytest} -q     # tests/: draft() against the lab's fake target, no model
```

(These name the lab's own environment in full, so they work from any
directory; with it activated, `source {activate}`, plain `pip`, `lab` and
`pytest` do the same.)

`{module}.py` holds the drafter: `draft(context, k)` gets the prompt and
every token generated so far and returns at most `k` (the arm's `n_max`)
token ids; `window` is its one option (`drafter_options = {{ window = 512 }}`
in a profile, a list sweeps it); renaming it means renaming it in
`{name}.toml` too (`{lab} check {name}.toml` names the line). The lab
verifies every draft with the target, so a bad proposal costs speed, never
correctness. The lab's docs/plugins.md has the whole contract and the test
helpers (`make_drafter`, `run_drafter`, `FakeTarget`).
"""


@dataclass(frozen=True)
class Scaffold:
    name: str
    directory: Path
    files: tuple[Path, ...]


class ScaffoldError(ValueError):
    pass


def env_tool(name: str) -> str:
    """The command that runs ``name`` from the lab's own environment, in
    full so it works from any directory."""
    here = Path(sys.executable).parent.absolute()
    if (here / name).exists() or name == "activate":
        return shlex.quote(str(here / name))
    python = shlex.quote(str(Path(sys.executable).absolute()))
    return f"{python} -m {'lab.cli' if name == 'lab' else name}"


def module_name(name: str) -> str:
    return "lab_" + name.replace("-", "_")


def class_name(name: str) -> str:
    return "".join(part.capitalize() for part in re.split(r"[-_]", name) if part) + "Drafter"


def installed_drafters() -> list[str]:
    """The drafter names the installed plugins register (the lab's own
    included): a new drafter by one of them would clash once installed."""
    from lab.registry import load_registry

    return sorted(load_registry().drafters)


def _same(name: str) -> str:
    # "draft_model" and "draft-model" make the same module and distribution
    return name.replace("_", "-")


def write_drafter_package(name: str, directory: str | Path | None = None, taken: Iterable[str] | None = None) -> Scaffold:
    """Write the package for drafter ``name`` into an empty ``directory``
    (default ./lab-NAME-drafter); ``name`` must not clash with ``taken``."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise ScaffoldError(
            f"drafter name {name!r}: use lowercase letters, digits, '-' or '_', starting with a letter "
            "(at most 40 characters)")
    taken = installed_drafters() if taken is None else list(taken)
    clash = next((t for t in taken if _same(t) == _same(name)), None)
    if clash is not None:
        raise ScaffoldError(f"drafter name {name!r}: a drafter {clash!r} is installed already, and two drafters "
                            "cannot share a name; pick another")
    dist = f"lab-{name}-drafter"
    target = Path(directory) if directory is not None else Path(dist)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ScaffoldError(f"{target} exists and is not an empty directory; pick another with --dir")
    module, cls = module_name(name), class_name(name)
    fields = {"name": name, "dist": dist, "module": module, "cls": cls, "pip": env_tool("pip"),
              "lab": env_tool("lab"), "pytest": env_tool("pytest"), "activate": env_tool("activate")}
    contents = {
        "pyproject.toml": PYPROJECT,
        f"{module}.py": MODULE,
        f"tests/test_{module}.py": TEST,
        f"{name}.toml": PROFILE,
        "README.md": README,
    }
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for filename, template in contents.items():
        path = target / filename
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(template.format(**fields), encoding="utf-8")
        written.append(path)
    return Scaffold(name, target, tuple(written))
