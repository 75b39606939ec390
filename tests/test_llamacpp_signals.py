"""Ctrl-C or SIGTERM during a llama.cpp model load stops the load. Python
runs a signal's handler at the next Python code, which during a load is
often llama.cpp's log callback, and ctypes swallows what a callback raises:
the interrupt was lost and the run went on. An alarm at 30 points across
one load, in a process of its own: without the engine's hook most of them
were swallowed (22 of 30 here); with it every interrupt that came during
the load reaches the caller."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
pytestmark = pytest.mark.engine

SCRIPT = r'''
import signal, sys, time
from lab.kit import models
from lab.registry import load_registry
from lab_llamacpp import engine
load_registry()
path = str(models.resolve("embedded:smollm2"))
engine.Model(path).close()
t0 = time.perf_counter(); engine.Model(path).close(); load_s = time.perf_counter() - t0
fired = []
def handler(signum, frame):
    fired.append(1)
    raise KeyboardInterrupt
signal.signal(signal.SIGALRM, handler)
raised = swallowed = 0
n = 30
for i in range(n):
    fired.clear()
    signal.setitimer(signal.ITIMER_REAL, load_s * (i + 0.5) / n)
    try:
        model = engine.Model(path)
    except KeyboardInterrupt:
        raised += 1
        continue
    signal.setitimer(signal.ITIMER_REAL, 0)
    swallowed += bool(fired)
    model.close()
print(f"raised {raised} swallowed {swallowed}")
'''


def test_an_interrupt_during_a_model_load_is_never_swallowed() -> None:
    res = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    found = re.search(r"raised (\d+) swallowed (\d+)", res.stdout)
    assert found, res.stdout
    raised, swallowed = int(found.group(1)), int(found.group(2))
    assert swallowed == 0, res.stdout
    assert raised >= 15, res.stdout  # the alarms did land inside the loads
    assert "Exception ignored" not in res.stderr
