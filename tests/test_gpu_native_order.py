"""Where llama.cpp's shared libraries load, and in which order: never in the
lab's own process (registering the plugins loads no engine), and first, before
numpy, in every process the lab starts to run one: an arm's
(tests/test_arm_deadlines.py runs one), the probe's, and a benchmark's (on the
GPU image the lab was measured on, the other order crashed at model load).
Checked with an audit hook that sees every ``ctypes.dlopen``."""

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
def test_registering_the_plugins_loads_no_engine_in_the_labs_process() -> None:
    assert dlopens("from lab.registry import load_registry\nload_registry()\nimport lab.runner") == []


def test_the_check_can_fail_when_numpy_is_first() -> None:
    seen = dlopens("import numpy\nimport llama_cpp")
    assert seen and seen[0][1] is True


@pytest.mark.slow
def test_the_probes_process_loads_llama_before_numpy() -> None:
    body = ("import sys\nsys.argv = ['probe_child', '/nonexistent.json', 'llama_cpp']\n"
            "from lab.base.native import preload\npreload('llama_cpp')\nimport lab.probing.isolated")
    seen = dlopens(body)
    assert seen and seen[0][1] is False, seen
    # and the entry does it before importing the lab: its module imports no numpy first
    seen = dlopens("import lab.probing.probe_child, sys\nassert 'numpy' not in sys.modules")
    assert seen == []


@pytest.mark.slow
def test_a_benchmark_loads_llama_before_numpy() -> None:
    seen = dlopens("import benchmarks\nimport numpy")
    assert seen and seen[0][1] is False, seen
