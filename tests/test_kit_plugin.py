"""lab.kit.plugin.Plugin: a plugin declared as data registers what its
references name, whole or not at all, and a bad reference is its load error."""

from __future__ import annotations

from typing import Any

import pytest

from lab.api import Check
from lab.kit.plugin import Plugin
from lab.registry import _entry_points, _is_builtin, load_registry


def models(register: Any) -> None:
    register("test:plugin-model", lambda path: None, "plugin-model.bin", "2")


def checks() -> list[Check]:
    return [Check("test-plugin", True, "here")]


def test_every_builtin_entry_point_loads() -> None:
    builtins = {ep.name for group in ("lab.backends", "lab.drafters") for ep in _entry_points(group) if _is_builtin(ep)}
    assert {"mlx", "vllm", "llamacpp-server"} <= builtins
    assert [e for e in load_registry().errors if e.entry_point in builtins] == []


def test_references_register_backends_models_and_checks() -> None:
    plugin = Plugin(backends=("tests.fakes:FakeBackend",), models=(f"{__name__}:models",),
                    checks=(f"{__name__}:checks",))
    reg = load_registry([plugin])
    assert reg.errors == [] and "fake" in reg.backends
    assert reg.models["test:plugin-model"].version == "2"
    got: list[Check] = []
    plugin.lab_doctor_checks(register=got.append)  # as the registry calls it (its doctor runs every plugin's)
    assert got == [Check("test-plugin", True, "here")]


def test_a_bad_reference_is_a_load_error_and_registers_nothing() -> None:
    reg = load_registry([Plugin(backends=("tests.fakes:FakeBackend", "tests.fakes:NoSuchBackend"))])
    assert "fake" not in reg.backends
    assert len(reg.errors) == 1 and "NoSuchBackend" in reg.errors[0].error


@pytest.mark.parametrize("ref", ["tests.fakes.FakeBackend", "tests.fakes:", ":FakeBackend", "a:b:c"])
def test_a_reference_that_is_not_module_colon_attribute_is_refused(ref: str) -> None:
    with pytest.raises(ValueError, match="module:attribute"):
        Plugin(backends=(ref,))
