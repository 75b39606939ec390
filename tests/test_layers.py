"""The lab's layers, held by import-linter (pyproject's [tool.importlinter]):
every import counts, those inside functions and under TYPE_CHECKING
included, since an import inside a function is still a dependency (it only
hides the order from Python). This file runs it, holds every lab module to a
layer, and shows the tool failing where it must."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def _contracts() -> dict[str, dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    return {str(c["id"]): c for c in config["contracts"]}


def _lint(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    if not LINT.exists():
        pytest.skip("import-linter is not installed here (bash scripts/setup.sh all,test)")
    return subprocess.run([str(LINT), "--no-cache", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_every_contract_is_kept() -> None:
    out = _lint(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


def test_every_lab_module_has_a_layer() -> None:
    layers = [name.strip() for layer in _contracts()["layers"]["layers"] for name in str(layer).split(":")]
    modules = []
    for f in (ROOT / "lab").rglob("*.py"):
        parts = list(f.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules.append(".".join(parts))
    # lab's own __init__ is the container, not a layer
    loose = [m for m in modules if m != "lab" and not any(m == n or m.startswith(n + ".") for n in layers)]
    assert loose == [], "modules no layer names (add them to [tool.importlinter]'s layers)"


def test_plugins_are_held_to_the_contract_and_apart() -> None:
    plugins = sorted(p.name for p in (ROOT / "plugins").iterdir() if (p / "__init__.py").exists())
    contracts = _contracts()
    assert sorted(contracts["plugins-below-services"]["source_modules"]) == plugins  # type: ignore[arg-type]
    assert sorted(contracts["plugins-apart"]["modules"]) == plugins  # type: ignore[arg-type]


def test_the_tool_sees_imports_in_functions_and_type_checking_blocks(tmp_path: Path) -> None:
    """A toy package with the same kind of contract: an upward import hidden
    in a function, another under TYPE_CHECKING, and a cycle inside one layer
    are each a broken contract naming the import."""
    files = {
        "toy/__init__.py": "",
        "toy/base/__init__.py": "",
        "toy/base/a.py": "def f():\n    from toy.face import main\n    return main\n",
        "toy/base/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from toy.face import main\n",
        "toy/face.py": "from toy.base import a\n\ndef main():\n    return a\n",
        "toy/mid/__init__.py": "",
        "toy/mid/x/__init__.py": "from toy.mid import y\n",
        "toy/mid/y/__init__.py": "from toy.mid import x\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    (tmp_path / ".importlinter").write_text(textwrap.dedent("""\
        [importlinter]
        root_package = toy

        [importlinter:contract:layers]
        name = toy layers
        type = layers
        layers =
            toy.face
            toy.mid
            toy.base

        [importlinter:contract:cycles]
        name = toy cycles
        type = acyclic_siblings
        ancestors =
            toy
        """), encoding="utf-8")
    out = subprocess.run([str(LINT), "--no-cache"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}) if LINT.exists() else None
    if out is None:
        pytest.skip("import-linter is not installed here (bash scripts/setup.sh all,test)")
    text = out.stdout + out.stderr
    assert out.returncode != 0, text
    assert "toy layers BROKEN" in text and "toy cycles BROKEN" in text, text
    assert "toy.base.a -> toy.face" in text and "toy.base.b -> toy.face" in text, text
