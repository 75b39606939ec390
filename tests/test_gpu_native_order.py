"""llama.cpp's shared libraries load before numpy where the lab can order
it: registering the llama.cpp plugin in a process without numpy yet, and
any command started through ``python -m lab_llamacpp.native_first`` (on
the GPU image the lab was measured on, the other order crashed at model
load). Checked with an audit hook that sees every ``ctypes.dlopen``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[llamacpp]')")

WATCH = """
import json, sys
seen = []
def hook(event, args):
    if event == "ctypes.dlopen" and "llama" in str(args[0]):
        seen.append([str(args[0]), "numpy" in sys.modules])
sys.addaudithook(hook)
{body}
print("ORDER=" + json.dumps(seen))
"""


def dlopens(body: str) -> list[tuple[str, bool]]:
    out = subprocess.run([sys.executable, "-c", WATCH.format(body=body)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    line = next(x for x in out.stdout.splitlines() if x.startswith("ORDER="))
    return [tuple(x) for x in json.loads(line[len("ORDER="):])]


@pytest.mark.slow
def test_registering_the_plugin_loads_llama_before_numpy() -> None:
    seen = dlopens("from lab.registry import load_registry\nload_registry()")
    assert seen, "the registry loaded no llama.cpp library"
    assert seen[0][1] is False, f"numpy came first: {seen}"


@pytest.mark.slow
def test_the_native_first_entry_puts_llama_ahead_of_the_core() -> None:
    body = "import sys\nsys.argv = ['lab', 'plugins']\nfrom lab_llamacpp import native_first\nnative_first.main()"
    seen = dlopens(body)
    assert seen and seen[0][1] is False, seen


def test_the_check_can_fail_when_numpy_is_first() -> None:
    seen = dlopens("import numpy\nimport llama_cpp")
    assert seen and seen[0][1] is True


@pytest.mark.slow
def test_a_benchmark_script_runs_behind_llama_too(tmp_path) -> None:  # type: ignore[no-untyped-def]
    script = tmp_path / "bench.py"
    script.write_text("import sys\nimport numpy\nprint('args', sys.argv[1:])\nsys.exit(3)\n")
    body = f"import sys\nsys.argv = ['x', {str(script)!r}, '--n', '1']\nfrom lab_llamacpp import native_first\nrc = native_first.main()\nprint('rc', rc)"
    seen = dlopens(body)
    assert seen and seen[0][1] is False, seen
