"""The lab's layers, checked from the source: every import counts, those
inside functions and under TYPE_CHECKING included, since an import inside a
function is still a dependency (it only hides the order from Python).

Bottom to top, each layer imports only layers below it (and modules of its
own layer, without a cycle):
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# (layer, the packages or modules it holds): declared once, here.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base: machine facts, text safety, strict JSON, metric formulas, events, the row and profile types",
     ("lab", "lab.base")),
    ("contract: what a plugin implements and the hooks it registers through", ("lab.api", "lab.hookspecs")),
    ("kit: what plugins may use (the speculative loop, prompts, model references, checks)", ("lab.kit",)),
    ("services: the registry, profiles, suites, telemetry, rows, the store, the scaffold",
     ("lab.registry", "lab.profile", "lab.suites", "lab.telemetry", "lab.rows", "lab.store", "lab.scaffold")),
    ("orchestration: the runner, the probe driver, the lossless sampler", ("lab.runner", "lab.arms", "lab.probing", "lab.lossless")),
    ("reading a run: analysis", ("lab.analysis",)),
    ("rendering: reports", ("lab.render",)),
    ("faces: the CLI and the TUI", ("lab.cli", "lab.tui", "lab.__main__")),
)
# Plugins sit beside the kit: they may use base, the contract and the kit.
PLUGIN_MAY_USE = 2
# Plugin modules allowed above that (none: an arm's process loads its engine first itself).
LAUNCHERS: dict[str, str] = {}


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for base, pkgs in ((ROOT, ["lab"]), (ROOT / "plugins", sorted(p.name for p in (ROOT / "plugins").iterdir()
                                                                      if (p / "__init__.py").exists()))):
        for pkg in pkgs:
            for f in (base / pkg).rglob("*.py"):
                parts = list(f.relative_to(base).with_suffix("").parts)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                found[".".join(parts)] = f
    return found


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
                parts = pkg.split(".")
                if node.level > 1:
                    parts = parts[: -(node.level - 1)]
                mod = ".".join(parts) + (f".{node.module}" if node.module else "")
            else:
                mod = node.module or ""
            targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
        for t in targets:
            while t and t not in known:
                t = t.rsplit(".", 1)[0] if "." in t else ""
            if t and t != name and not name.startswith(t + "."):
                out.add(t)
    return out


def _graph() -> dict[str, set[str]]:
    known = _modules()
    return {m: _imports(m, p, known) for m, p in known.items()}


def layer_of(module: str) -> int | None:
    """The layer of a lab module (None for a plugin's)."""
    best: tuple[int, int] | None = None
    for rank, (_, members) in enumerate(LAYERS):
        for m in members:
            if module == m or module.startswith(m + "."):
                if best is None or len(m) > best[1]:
                    best = (rank, len(m))
    return None if best is None else best[0]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


@pytest.mark.slow
def test_no_import_cycles_anywhere() -> None:
    assert _cycles(_graph()) == []


@pytest.mark.slow
def test_every_lab_module_has_a_layer() -> None:
    lab = [m for m in _graph() if m == "lab" or m.startswith("lab.")]
    assert [m for m in lab if layer_of(m) is None] == []


@pytest.mark.slow
def test_no_import_reaches_a_higher_layer() -> None:
    upward = []
    for module, targets in _graph().items():
        here = layer_of(module)
        plugin = here is None
        for t in targets:
            there = layer_of(t)
            if there is None or LAUNCHERS.get(module) == t:
                continue  # a plugin's own module (plugins importing plugins: test_boundaries)
            limit = PLUGIN_MAY_USE if plugin else here
            if there > limit:  # type: ignore[operator]
                upward.append(f"{module} -> {t}")
    assert upward == []


def test_the_checks_can_fail() -> None:
    graph = {"a": {"b"}, "b": {"a"}, "c": set()}
    assert _cycles(graph) == [["a", "b"]]
    assert layer_of("lab.runner") > layer_of("lab.registry")  # type: ignore[operator]
    assert layer_of("lab.base.events") == 0 and layer_of("lab_llamacpp.backend") is None
