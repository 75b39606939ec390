"""The one llama.cpp build: the library the in-process backend loads and the
tools the lab runs come from the same build tree, as scripts/build_llama.sh
lays it out after `setup.sh all` (or `test`); and the set-up scripts' own
decisions (CUDA or not, how a wheelhouse is cut for transfer). Which Python
and which installer set-up takes, and the scripts' portability:
tests/test_setup_scripts.py."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from lab.kit.llama_tools import TOOLS, build_command, built_tool, library_dir

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=ROOT, env={**os.environ, **env})


@pytest.mark.engine
def test_llama_cpp_python_brings_no_library_of_its_own() -> None:
    # The installed wheel is llama-cpp-python's Python code only: a compiled
    # file in its record means pip built a second llama.cpp.
    files = importlib.metadata.files("llama-cpp-python") or []
    compiled = [str(f) for f in files if ".so" in f.name or f.name.endswith((".dylib", ".dll"))]
    assert compiled == []
    lib = library_dir()
    assert lib is not None
    assert any(name.startswith("libllama.") for name in os.listdir(lib))


@pytest.mark.engine
def test_llama_cpp_loads_the_library_of_the_build() -> None:
    # A fresh interpreter: which file ctypes opened, before any test loaded one.
    code = "import llama_cpp.llama_cpp as l; print(l._lib._name); print(l.llama_print_system_info().decode())"
    out = _run(sys.executable, "-c", code)
    assert out.returncode == 0, out.stderr
    loaded, info = out.stdout.split("\n", 1)
    lib = library_dir()
    assert lib is not None
    assert os.path.dirname(os.path.realpath(loaded)) == os.path.realpath(lib)
    if sys.platform.startswith("linux") and platform.machine() == "x86_64":
        # The explicit x86-64 flag set: AVX2 in, AMX out (AMX kernels die
        # with SIGILL on VMs that advertise it).
        assert "AVX2 = 1" in info
        assert "AMX_INT8 = 1" not in info


@pytest.mark.engine
@pytest.mark.parametrize("tool", TOOLS)
def test_tool_is_built_beside_the_library_and_runs(tool: str) -> None:
    path = built_tool(tool)
    assert path is not None, f"{tool} missing; {build_command()}"
    assert os.path.dirname(path) == sysconfig.get_path("scripts")
    real = os.path.realpath(path)
    lib = library_dir()
    assert lib is not None and os.path.dirname(real) == os.path.realpath(lib)
    out = _run(path, "--help")
    text = out.stdout + out.stderr
    assert "error while loading shared libraries" not in text
    assert "usage" in text.lower(), text[-2000:]
    if sys.platform.startswith("linux"):
        # The tool links the very libllama the Python package loads, not a
        # copy from elsewhere on the loader's path.
        ldd = _run("ldd", real).stdout
        linked = [line.split("=>")[1].split("(")[0].strip() for line in ldd.splitlines() if "libllama.so" in line]
        assert linked and os.path.realpath(linked[0]) == os.path.realpath(os.path.join(lib, "libllama.so"))


@pytest.mark.engine
def test_server_offers_the_vendored_spec_types() -> None:
    path = built_tool("llama-server")
    assert path is not None
    text = _run(path, "--help").stdout
    for spec_type in ("draft-simple", "draft-mtp", "draft-dflash"):
        assert spec_type in text


def _stub(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _flags(tmp_path: Path, gpu_line: str, **env: str) -> str:
    # nvcc and nvidia-smi as the script sees them on a GPU host and on a CPU
    # host that carries the toolkit; the rest of PATH stays real.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    _stub(bin_dir, "nvcc", "exit 0\n")
    _stub(bin_dir, "nvidia-smi", f'case "$1" in -L) echo "{gpu_line}";; *) echo "9.0";; esac\n')
    out = _run("bash", "scripts/build_llama.sh", "flags", PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", **env)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_cuda_is_built_only_where_a_gpu_is_visible(tmp_path: Path) -> None:
    gpu = "GPU 0: NVIDIA H200 (UUID: GPU-0)"
    assert "-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90" in _flags(tmp_path, gpu)
    assert "GGML_CUDA" not in _flags(tmp_path, "")
    assert "GGML_CUDA" not in _flags(tmp_path, gpu, LAB_CUDA="0")
    forced = _flags(tmp_path, "", LAB_CUDA="1", LAB_CUDA_ARCH="89")
    assert "-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=89" in forced


def test_wheelhouse_is_cut_for_transfer_and_joined_again(tmp_path: Path) -> None:
    staging = tmp_path / "staging"
    staging.mkdir()
    rng = __import__("random").Random(7)
    sizes = {"big-1.0-py3-none-any.whl": 2_600_000, "a-1.0-py3-none-any.whl": 700_000,
             "b-1.0.tar.gz": 400_000, "c-1.0-py3-none-any.whl": 300_000}
    originals = {name: rng.randbytes(size) for name, size in sizes.items()}
    for name, data in originals.items():
        (staging / name).write_bytes(data)
    house = tmp_path / "house"
    packed = _run("bash", "scripts/wheelhouse.sh", "pack", str(staging), str(house), CARRY_MB="1")
    assert packed.returncode == 0, packed.stderr
    limit = 1024 * 1024
    groups = sorted(house.glob("carry-*"))
    assert len(groups) > 1
    for group in groups:
        assert sum(f.stat().st_size for f in group.iterdir()) <= limit
    flat = _run("bash", "scripts/wheelhouse.sh", "flat", str(house), XDG_CACHE_HOME=str(tmp_path / "cache"))
    assert flat.returncode == 0, flat.stderr
    joined = Path(flat.stdout.strip())
    assert {p.name: p.read_bytes() for p in joined.iterdir()} == originals
