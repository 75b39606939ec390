"""The lab's command line with llama.cpp's libraries loaded before numpy:
``python -m lab_llamacpp.native_first run PROFILE`` is ``lab run PROFILE``,
for where numpy's OpenMP runtime would crash a later ggml CPU backend."""

from __future__ import annotations

import sys


def load_llama_first() -> bool:
    """Import llama_cpp (which loads its shared libraries) unless numpy is
    already in; False when it came too late or is not installed."""
    if "numpy" in sys.modules and "llama_cpp" not in sys.modules:
        return False
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> int:
    load_llama_first()
    args = sys.argv[1:]
    if args and args[0].endswith(".py"):
        import runpy

        sys.argv = args
        try:
            runpy.run_path(args[0], run_name="__main__")
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        return 0
    from lab.cli import main as lab_main

    return lab_main(args)


if __name__ == "__main__":
    sys.exit(main())
