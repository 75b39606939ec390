"""Whether the vLLM set imports: vLLM itself, transformers (it reads the GGUF
the lab converts) and torch. The CPU wheel's dependencies bring CUDA builds
of torchvision, torchaudio and torchcodec that fail at import and take
transformers and the server down with them; the check names them."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

from lab.api import Check

IMPORT_CHECK = (
    "import importlib.metadata as m, vllm, transformers, torch, gguf, accelerate; "
    "print(vllm.__version__, torch.__version__, transformers.__version__)"
)
BROKEN_EXTRAS = ("torchvision", "torchaudio", "torchcodec")


def check_install(python: str | None = None, timeout: float = 300.0) -> tuple[bool, str]:
    """(ok, what was found): imports the set in a child interpreter, since
    importing vLLM takes tens of seconds and much memory."""
    if python is None and importlib.util.find_spec("vllm") is None:
        return False, "vllm is not installed"
    if python is None:
        stray = [name for name in BROKEN_EXTRAS if importlib.util.find_spec(name) is not None]
    else:
        stray = []
    try:
        done = subprocess.run([python or sys.executable, "-c", IMPORT_CHECK], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"importing vllm took over {timeout:.0f} s"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        hint = f" ({', '.join(stray)} installed: remove them)" if stray else ""
        return False, f"the vllm set does not import: {last}{hint}"
    version = done.stdout.strip()
    return True, f"vllm {version.split()[0]} (torch {version.split()[1]}, transformers {version.split()[2]})"


def doctor_checks() -> list[Check]:
    ok, detail = check_install()
    return [Check("vllm", ok, detail, "" if ok else "bash scripts/setup.sh llamacpp,vllm")]
