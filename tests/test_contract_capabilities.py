"""The whole plugin contract is in lab.api: every capability the core reads
from a plugin class is declared there, with its default, and the registry
is the one place that inspects a plugin class (it holds each one to
``lab.api.CAPABILITIES`` at load). Everywhere else the core reads plain
attributes, so a ``getattr(x, "name", default)`` in lab/ is a capability
probed behind the contract's back unless it is listed here with why."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, Callable, Mapping

import pytest

from lab.api import CAPABILITIES, Backend, Drafter, Option
from lab.hookspecs import hookimpl
from lab.registry import held_to_contract, load_registry

LAB = Path(__file__).resolve().parents[1] / "lab"
# The documented place: it inspects plugin classes and entry points.
INSPECTOR = "registry.py"
# Every other getattr/hasattr with a literal name in lab/, and what it reads
# (none of them is a plugin class).
ALLOWED: dict[tuple[str, str], str] = {
    ("base/machine.py", "sched_getaffinity"): "os, on platforms without it",
    ("cli/__init__.py", "DESCRIPTION"): "a command module of the lab's own",
    ("cli/lossless.py", "run"): "an argparse namespace built by tests or the parser",
    ("render/report.py", "memory_only"): "the run store, or none",
    ("suites/readers.py", "msg"): "a JSON decoding error",
    ("telemetry/contention.py", "iowait"): "psutil's CPU times, which differ by platform",
    ("telemetry/contention.py", "guest"): "psutil's CPU times, which differ by platform",
    ("telemetry/contention.py", "guest_nice"): "psutil's CPU times, which differ by platform",
    ("telemetry/gpu.py", "clocks"): "a step record of a saved run, older ones lack it",
    ("telemetry/gpu.py", "usedGpuMemory"): "NVML's process record",
    ("tui/widgets/stream_text.py", "_scroll_update"): "Textual's own widget internals",
}
# Names a plugin must give itself: declared on the contract without a value.
GIVEN_BY_PLUGIN = {"name", "stack"}


def probes(root: Path) -> set[tuple[str, str]]:
    """(module path under root, attribute) of every getattr/hasattr with a
    literal attribute name, outside the inspector."""
    found = set()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel == INSPECTOR:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
                    and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
                found.add((rel, node.args[1].value))
    return found


def test_the_core_probes_no_capability_outside_the_registry() -> None:
    assert probes(LAB) - set(ALLOWED) == set()


def test_the_allowed_list_holds_only_probes_that_exist() -> None:
    # a stale entry would let a new probe of that name in unseen
    assert set(ALLOWED) - probes(LAB) == set()


def test_the_scan_sees_a_probe(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("def f(cls):\n    return getattr(cls, 'needs_model', False)\n")
    assert probes(tmp_path) == {("m.py", "needs_model")}


@pytest.mark.parametrize("base", sorted(CAPABILITIES, key=lambda c: c.__name__))
def test_every_capability_is_declared_on_the_contract(base: type) -> None:
    annotations: dict[str, Any] = {}
    for klass in reversed(base.__mro__):
        annotations.update(getattr(klass, "__annotations__", {}))
    for attr in CAPABILITIES[base]:
        if attr in GIVEN_BY_PLUGIN:
            assert attr in annotations, f"{base.__name__}.{attr} is not declared"
        else:
            assert hasattr(base, attr), f"{base.__name__}.{attr} has no default"


def test_every_builtin_plugin_meets_the_contract() -> None:
    registry = load_registry()
    assert registry.errors == []
    for cls in registry.backends.values():
        held_to_contract(cls, Backend, cls.name)
    for dcls in registry.drafters.values():
        held_to_contract(dcls, Drafter, dcls.name)


class _BoolNeedsModel(Backend):
    # the shape the core used to accept: a bool where the contract has a method
    name = "bool-needs-model"
    stack = "test"
    needs_model = True  # type: ignore[assignment]

    def load(self, emit: Callable[..., None]) -> None: ...
    def generate(self, request: Any, emit: Callable[..., None], cancelled: Callable[[], bool]) -> Any: ...
    def close(self) -> None: ...


class _DictOptions(_BoolNeedsModel):
    name = "dict-options"

    @classmethod
    def needs_model(cls, arm_options: Mapping[str, Any]) -> bool:
        return True

    options = ({"name": "x"},)  # type: ignore[assignment]


class _Fine(_DictOptions):
    name = "fine"
    options = (Option("x", int, 1, "an option"),)


class _Plugin:
    __name__ = "contract-test"

    @hookimpl
    def lab_register_backends(self, register: Callable[[type[Backend]], None]) -> None:
        register(self.cls)

    def __init__(self, cls: type[Backend]) -> None:
        self.cls = cls


@pytest.mark.parametrize(("cls", "said"), [(_BoolNeedsModel, "needs_model must be a method"),
                                           (_DictOptions, "must be lab.api.Option")])
def test_a_class_off_the_contract_is_a_load_error_that_names_it(cls: type[Backend], said: str) -> None:
    plugin = _Plugin(cls)
    plugin.__name__ = f"contract-{cls.name}"  # type: ignore[misc]
    registry = load_registry(extra_plugins=[plugin])
    assert cls.name not in registry.backends
    errors = [e for e in registry.errors if e.entry_point == plugin.__name__]
    assert len(errors) == 1 and said in errors[0].error and cls.__name__ in errors[0].error


def test_a_class_on_the_contract_loads() -> None:
    plugin = _Plugin(_Fine)
    plugin.__name__ = "contract-fine"  # type: ignore[misc]
    registry = load_registry(extra_plugins=[plugin])
    assert registry.backends["fine"] is _Fine and registry.backends["fine"].needs_model({})
