"""The lab's own llama.cpp build, as scripts/build_llama.sh lays it out.

One build serves both llama.cpp stacks: its shared libraries sit in the
``llama_cpp`` package's ``lib/`` directory (where llama-cpp-python loads
them) and, when the tools were asked for, llama-server, llama-bench,
llama-batched-bench and llama-quantize sit beside them, linked from the
environment's ``bin/``. The ``llamacpp`` extra builds only the library; the
tools come with ``all``/``test`` or with the command ``build_command`` names.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import sys
import sysconfig
from pathlib import Path

TOOLS = ("llama-server", "llama-bench", "llama-batched-bench", "llama-quantize")
BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "build_llama.sh"


def library_dir() -> str | None:
    """The ``llama_cpp`` package's ``lib/``, found without importing the
    package (importing it loads the library)."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(next(iter(spec.submodule_search_locations)), "lib")


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def built_tool(name: str) -> str | None:
    """Path of a tool the lab's build put in this environment, or None.

    The environment's ``bin/`` comes first: that is the name a user sees;
    the library directory catches an environment whose links were lost."""
    for folder in (sysconfig.get_path("scripts"), library_dir()):
        if folder and _executable(os.path.join(folder, name)):
            return os.path.join(folder, name)
    return None


def build_command() -> str:
    """The exact shell command that adds the tools to this environment's
    build (the library objects are reused: only the tools compile)."""
    return f"VENV={shlex.quote(sys.prefix)} bash {shlex.quote(str(BUILD_SCRIPT))} tools"


def missing_tool_hint(name: str) -> str:
    """What to tell a user whose profile needs a tool this environment lacks."""
    return (
        f"{name} is not built in this environment: run `{build_command()}` "
        "(compiles the four llama.cpp tools into the existing build, about 5 min on 2 cores; "
        "CUDA when a GPU is visible), put it on PATH, or give its path in the profile"
    )
