"""What plugins build their checks from: the doctor's lines (``lab_doctor_checks``) and
whether an engine imports (``Backend.missing_engine``)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import threading
from importlib.metadata import PackageNotFoundError, version

from lab.api import Check


def package_check(dist: str, module: str, fix: str, required: bool = False) -> Check:
    """Whether the distribution ``dist`` (imported as ``module``) is
    installed, and its version; for plugins' checks too."""
    if importlib.util.find_spec(module) is None:
        return Check(dist, False, "not installed", fix, required)
    try:
        v = version(dist)
    except PackageNotFoundError:
        v = "?"
    return Check(dist, True, f"{v}", "", required)


# the child imports each module named and prints the first failure
_IMPORT_CHILD = (
    "import importlib, sys\n"
    "for name in sys.argv[1:]:\n"
    "    try:\n"
    "        importlib.import_module(name)\n"
    "    except BaseException as exc:\n"
    "        print(f'importing {name} failed: {type(exc).__name__}: {exc}'[:400])\n"
    "        sys.exit(1)\n"
)
_import_results: dict[tuple[str, ...], str | None] = {}
_import_lock = threading.Lock()


def import_failure(*modules: str, found: tuple[str, ...] = (), timeout: float = 120.0) -> str | None:
    """Why ``modules`` do not import here, or None. Tried in a child
    interpreter (killed on every way out) so a broken engine cannot take the
    lab down; remembered per process. ``found``: only looked up."""
    key = (*modules, "|", *found)
    with _import_lock:
        if key in _import_results:
            return _import_results[key]
    absent = [m.split(".")[0] for m in (*modules, *found) if not _installed(m.split(".")[0])]
    if absent:
        why: str | None = f"{absent[0]} is not installed"
    else:
        try:
            done = subprocess.run([sys.executable, "-c", _IMPORT_CHILD, *modules], capture_output=True, text=True,
                                  timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            why = f"importing {', '.join(modules)} took over {timeout:.0f} s"
        else:
            said = [ln for ln in done.stdout.splitlines() if ln.strip()]
            lines = said or [ln for ln in done.stderr.splitlines() if ln.strip()]
            why = None if done.returncode == 0 else (lines[-1] if lines else f"the import exited {done.returncode}")
    with _import_lock:
        _import_results[key] = why
    return why


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
