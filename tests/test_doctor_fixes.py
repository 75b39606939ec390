"""``lab doctor``: one fix per problem, and the fix is the command that
installs what is missing (the llama-server line once said one command in
its message and another, which does not build it, as its fix)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from lab.api import Check
from lab.kit import llama_tools, mlx_platform

ROOT = Path(__file__).resolve().parents[1]


def _plugin_checks(plugin: Any) -> list[Check]:
    """One plugin's doctor lines, through its hook as the registry calls it."""
    got: list[Check] = []
    plugin.lab_doctor_checks(register=got.append)
    return got


def test_missing_llama_server_has_one_fix_that_builds_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import lab_llamacpp_server
    import lab_llamacpp_server.binary as binary

    monkeypatch.setattr(binary, "find_llama_tool", lambda name: None)
    check = next(c for c in _plugin_checks(lab_llamacpp_server.plugin) if c.name == "llama-server")
    assert not check.ok
    assert check.fix == llama_tools.build_command()
    # the message says what is missing, not a second command
    assert "build_llama.sh" not in check.detail and "pip install" not in check.detail
    # the fix runs the project's build script with a step it has
    script = llama_tools.BUILD_SCRIPT
    assert script.exists() and str(script) in check.fix and check.fix.endswith(" tools")
    assert "bash scripts/build_llama.sh tools" in script.read_text(encoding="utf-8")


def test_a_broken_mlx_is_missing_in_doctor_as_in_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """An mlx that is installed but does not import is reported missing,
    with the one command that installs it."""
    from lab.kit import checks

    monkeypatch.setattr(checks, "_import_results", {("mlx.core", "|"): "importing mlx.core failed: ImportError: x"})
    import lab_mlx

    check = next(c for c in _plugin_checks(lab_mlx.plugin) if c.name == "mlx")
    assert not check.ok and "ImportError" in check.detail
    assert check.fix == mlx_platform.install_line() and check.fix
    assert (ROOT / "scripts" / "setup.sh").exists()


@pytest.mark.parametrize(("system", "machine", "fix"), [
    ("Linux", "x86_64", "bash scripts/setup.sh mlx"),
    ("Linux", "aarch64", "bash scripts/setup.sh mlx"),
    ("Darwin", "arm64", "bash scripts/setup.sh mlx"),
    ("Windows", "amd64", ""),
])
def test_mlx_is_fixed_with_the_set_up_of_the_platform_it_runs_on(monkeypatch: pytest.MonkeyPatch, system: str,
                                                                   machine: str, fix: str) -> None:
    """Wherever MLX runs the fix is the project's set-up (its mlx extra takes
    MLX's CPU build on Linux, Metal's on a Mac); where it cannot, no fix."""
    import platform

    from lab.kit import checks

    monkeypatch.setattr(platform, "system", lambda: system)
    monkeypatch.setattr(platform, "machine", lambda: machine)
    monkeypatch.setattr(checks, "_import_results", {("mlx.core", "|"): "importing mlx.core failed: ImportError: x"})
    import lab_mlx

    check = next(c for c in _plugin_checks(lab_mlx.plugin) if c.name == "mlx")
    assert not check.ok and check.fix == fix


@pytest.mark.parametrize(("system", "machine"), [("Windows", "AMD64"), ("Darwin", "x86_64"), ("Linux", "riscv64")])
def test_where_mlx_cannot_run_its_backends_are_unavailable_here_with_nothing_to_install(
        monkeypatch: pytest.MonkeyPatch, system: str, machine: str) -> None:
    import platform

    import lab_dflash_mlx
    import lab_mlx
    import lab_zlab_dflash
    from lab_mlx.backend import MlxBackend
    from lab_mlx_lm.backend import MlxLmBackend

    monkeypatch.setattr(platform, "system", lambda: system)
    monkeypatch.setattr(platform, "machine", lambda: machine)
    got = [c for plugin in (lab_mlx.plugin, lab_dflash_mlx.plugin, lab_zlab_dflash.plugin) for c in _plugin_checks(plugin)]
    assert [c.name for c in got] == ["mlx", "dflash-mlx", "dflash"]
    for check in got:
        assert not check.ok and not check.required and check.fix == "", check
        assert check.detail.startswith("unavailable here: MLX runs on Apple silicon macOS and on Linux"), check
    assert "backends mlx, mlx-dflash, mlx-mtp, mlx-lm" in got[0].detail
    # lab check and lab run say the same, with no install line
    for backend in (MlxBackend, MlxLmBackend):
        missing = backend.missing_engine({})
        assert missing is not None and missing.install == "" and missing.why.startswith("unavailable here")


@pytest.mark.slow
def test_every_failed_check_has_one_fix_line_not_repeated_in_its_message(registry, capsys) -> None:
    """The whole doctor (it imports vLLM in a child: seconds)."""
    from lab.cli import main

    main(["doctor"], registry=registry)
    out = capsys.readouterr().out.splitlines()
    for i, line in enumerate(out):
        if line.startswith("-- "):
            fixes = [x for x in out[i + 1:i + 3] if x.strip().startswith("fix:")]
            assert len(fixes) <= 1, out[i:i + 3]
            if fixes:
                assert "fix:" not in line and "(fix" not in line, line


def test_setup_script_takes_the_extras_the_fixes_name() -> None:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    for extra in ("mlx", "llamacpp", "vllm"):
        assert f"\n{extra} = [" in text, extra
    assert sys.executable
