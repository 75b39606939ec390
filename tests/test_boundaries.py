"""Import boundaries the plugin contract relies on, checked statically (by
parsing each module's imports, so a lazy import inside a function counts
too): the core knows no plugin, and the built-in drafters know no backend."""

from __future__ import annotations

import ast
from pathlib import Path

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


def test_core_imports_no_plugin_package() -> None:
    assert offenders(ROOT / "lab", None) == []


def test_builtin_drafters_import_no_backend_plugin() -> None:
    assert offenders(ROOT / "plugins" / "lab_drafters", BACKEND_PACKAGES) == []


def test_the_check_sees_lazy_imports(tmp_path: Path) -> None:
    # The check must be able to fail: an import inside a function is found.
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "m.py").write_text("def f():\n    from lab_mlx.engine import EngineThread\n    import lab_llamacpp\n")
    assert offenders(pkg, None) == ["pkg/m.py:2 imports lab_mlx.engine", "pkg/m.py:3 imports lab_llamacpp"]
    assert offenders(pkg, ("lab_mlx",)) == ["pkg/m.py:2 imports lab_mlx.engine"]
