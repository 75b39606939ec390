"""Import boundaries the plugin contract relies on, checked statically (by
parsing each module's imports, so a lazy import inside a function or under
TYPE_CHECKING counts too): the core knows no plugin, and no plugin knows
another (what plugins share lives in lab.kit)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BACKEND_PACKAGES = ("lab_llamacpp", "lab_llamacpp_server", "lab_mlx")


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in a file, absolute or relative."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def offenders(package_dir: Path, forbidden: tuple[str, ...] | None) -> list[str]:
    """Imports under ``package_dir`` of a forbidden top-level package (None:
    any ``lab_*`` plugin package)."""
    out = []
    for path in sorted(package_dir.rglob("*.py")):
        for line, module in imported_modules(path):
            top = module.split(".")[0]
            bad = top.startswith("lab_") if forbidden is None else top in forbidden
            if bad:
                out.append(f"{path.relative_to(package_dir.parent)}:{line} imports {module}")
    return out


def plugin_packages(plugins_dir: Path) -> list[str]:
    """The packages under ``plugins_dir`` (folders with an ``__init__.py``)."""
    return sorted(p.name for p in plugins_dir.iterdir() if (p / "__init__.py").exists())


def cross_plugin_imports(plugins_dir: Path) -> list[str]:
    """Imports in a plugin package of any other plugin package. Relative
    imports stay inside their package; every absolute one is read, those
    inside functions and under TYPE_CHECKING included."""
    packages = plugin_packages(plugins_dir)
    out = []
    for pkg in packages:
        others = tuple(p for p in packages if p != pkg)
        out.extend(offenders(plugins_dir / pkg, others))
    return out


@pytest.mark.slow
def test_core_imports_no_plugin_package() -> None:
    assert offenders(ROOT / "lab", None) == []


def test_builtin_drafters_import_no_backend_plugin() -> None:
    assert offenders(ROOT / "plugins" / "lab_drafters", BACKEND_PACKAGES) == []


def test_no_plugin_imports_another_plugin() -> None:
    # the built-in plugins are all found (a renamed folder must not pass unread)
    assert {"lab_drafters", "lab_llamacpp", "lab_llamacpp_server", "lab_mlx", "lab_vllm"} <= set(
        plugin_packages(ROOT / "plugins"))
    assert cross_plugin_imports(ROOT / "plugins") == []


def test_the_cross_plugin_check_can_fail(tmp_path: Path) -> None:
    # two synthetic plugins: one reaching into the other at module level, in
    # a function and under TYPE_CHECKING; its own and lab.kit imports pass
    for name in ("lab_a", "lab_b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / "not_a_package").mkdir()
    (tmp_path / "lab_a" / "m.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "import lab_b.tools\n"
        "from lab.kit.server import process\n"
        "from lab_a import own\n"
        "from . import sibling\n"
        "def f():\n"
        "    from lab_b.x import y\n"
        "if TYPE_CHECKING:\n"
        "    from lab_b import z\n"
    )
    assert plugin_packages(tmp_path) == ["lab_a", "lab_b"]
    assert cross_plugin_imports(tmp_path) == [
        "lab_a/m.py:2 imports lab_b.tools", "lab_a/m.py:7 imports lab_b.x", "lab_a/m.py:9 imports lab_b",
    ]


def test_the_check_sees_lazy_imports(tmp_path: Path) -> None:
    # The check must be able to fail: an import inside a function is found.
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "m.py").write_text("def f():\n    from lab_mlx.engine import EngineThread\n    import lab_llamacpp\n")
    assert offenders(pkg, None) == ["pkg/m.py:2 imports lab_mlx.engine", "pkg/m.py:3 imports lab_llamacpp"]
    assert offenders(pkg, ("lab_mlx",)) == ["pkg/m.py:2 imports lab_mlx.engine"]
