#!/usr/bin/env bash
# One llama.cpp build for the lab: the shared libraries the `llama_cpp`
# Python package loads and the four tools the lab runs (llama-server,
# llama-bench, llama-batched-bench, llama-quantize), compiled once from the
# llama.cpp source that llama-cpp-python vendors, so the in-process engine and
# the server arms run the same code.
#
#   bash scripts/build_llama.sh python   # llama-cpp-python's Python code only, into $VENV
#   bash scripts/build_llama.sh lib      # + the library, built once per flag set, into $VENV
#   bash scripts/build_llama.sh tools    # + the four tools, added to the same build tree
#   bash scripts/build_llama.sh flags    # print the CMake flags this machine gets
#
# setup.sh splits `lib`/`tools` so the compile overlaps the installs: `source` fetches
# the sdist, `lib --compile` / `tools --compile` only compile, and
# `lib --place` / `tools --place` copy the build into $VENV without touching
# the Python package.
#
# The build tree lives in the cache, keyed by its flags, so `tools` after
# `lib` compiles only what the tools add, and a second venv reuses both.
# Libraries and tools are copied side by side into the package's lib/ dir
# (where llama_cpp looks for libllama); they find each other through an
# $ORIGIN run path, and the tools are linked from $VENV/bin.
#
# Environment:
#   VENV             the virtualenv to install into (default .venv)
#   CMAKE_ARGS       replaces the CPU flags chosen below
#   LAB_CUDA         1: build CUDA; 0: never; unset: when nvcc exists and
#                    nvidia-smi lists a GPU
#   LAB_CUDA_ARCH    CUDA architectures (default: the visible GPUs', e.g. 90)
#   LAB_WHEELHOUSE   offline: take llama-cpp-python from this directory
#                    (see scripts/wheelhouse.sh)
#   LAB_INSTALLER    uv or pip: what installs llama-cpp-python's Python code
#                    (default: uv where uv made $VENV, else pip)
#   UV               the uv to use (default: scripts/find_uv.sh's)
set -euo pipefail
cd "$(dirname "$0")/.."
WHAT="${1:-lib}"
MODE="${2:-}"
VENV="${VENV:-.venv}"
VERSION=0.3.36
# The llama.cpp release that version vendors (b11312, commit 0c1e570). Its
# sdist carries no usable git metadata, and llama.cpp would otherwise ask
# whatever repository encloses the cache; the tools print these in
# --version, where the server plugin reads the build number.
LLAMA_RELEASE=11312
LLAMA_COMMIT=0c1e570
TOOLS=(llama-server llama-bench llama-batched-bench llama-quantize)
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/speclab"
PY="$VENV/bin/python"

case "$WHAT/$MODE" in
  python/|source/|flags/|lib/|tools/|lib/--compile|tools/--compile|lib/--place|tools/--place) ;;
  *) echo "usage: $0 python|source|flags|lib|tools [--compile|--place]" >&2; exit 2 ;;
esac

cores() { nproc 2>/dev/null || sysctl -n hw.ncpu 2>/dev/null || echo 2; }
digest() { if command -v sha256sum >/dev/null; then sha256sum; else shasum -a 256; fi | cut -c1-12; }
# One build at a time per cache entry: two setups sharing a cache would
# otherwise write the same build tree at once.
lock() { if command -v flock >/dev/null; then exec 9>"$1"; flock 9; fi; }

# setup.sh flattens the wheelhouse once and says where; called alone, do it here.
wheelhouse() { echo "${LAB_WHEELHOUSE_FLAT:-$(bash scripts/wheelhouse.sh flat "$LAB_WHEELHOUSE")}"; }

# As setup.sh said, else as $VENV was made (uv notes itself in pyvenv.cfg).
# With uv, the source comes from the address and hash uv.lock records.
with_uv() {
  case "${LAB_INSTALLER:-}" in
    uv) return 0 ;;
    pip) return 1 ;;
  esac
  grep -q '^uv = ' "$VENV/pyvenv.cfg" 2>/dev/null
}
uv() { "${UV:-$(bash scripts/find_uv.sh "$PY")}" "$@"; }

fetch_locked() {
  local name="$1" dest="$2" line url hash
  line=$(grep -o "url = \"[^\"]*/$name\", hash = \"sha256:[0-9a-f]*\"" uv.lock | head -1) || true
  url=$(echo "$line" | sed -n 's/^url = "\([^"]*\)".*/\1/p')
  hash=$(echo "$line" | sed -n 's/.*hash = "sha256:\([0-9a-f]*\)"$/\1/p')
  [ -n "$url" ] && [ -n "$hash" ] || { echo "uv.lock records no $name" >&2; exit 1; }
  "$PY" - "$url" "$hash" "$dest/$name" <<'EOF'
import hashlib, os, sys, urllib.request
url, want, dest = sys.argv[1:]
part = dest + ".part"
digest = hashlib.sha256()
with urllib.request.urlopen(url, timeout=60) as response, open(part, "wb") as out:
    while chunk := response.read(1 << 20):
        digest.update(chunk)
        out.write(chunk)
if digest.hexdigest() != want:
    os.remove(part)
    sys.exit(f"{os.path.basename(dest)}: sha256 {digest.hexdigest()} is not the lock's {want}")
os.replace(part, dest)
EOF
}

sdist() {
  local name="llama_cpp_python-$VERSION.tar.gz"
  if [ -n "${LAB_WHEELHOUSE:-}" ]; then
    local found="$(wheelhouse)/$name"
    [ -f "$found" ] || { echo "offline: $name is not in $LAB_WHEELHOUSE (fill it with scripts/wheelhouse.sh)" >&2; exit 1; }
    echo "$found"
    return
  fi
  mkdir -p "$CACHE/src"
  if [ ! -f "$CACHE/src/$name" ]; then
    echo "downloading the llama-cpp-python $VERSION source (76 MB)..." >&2
    if ! with_uv; then
      "$PY" -m pip download --quiet --no-deps --no-binary llama-cpp-python -d "$CACHE/src" "llama-cpp-python==$VERSION" >&2
    else
      fetch_locked "$name" "$CACHE/src"
    fi
  fi
  echo "$CACHE/src/$name"
}

# The Python half of llama-cpp-python, built with its own switch that leaves
# llama.cpp out (LLAMA_BUILD=OFF): seconds instead of a second compile.
install_python() {
  local wheels="$CACHE/wheels/python-only" tarball
  if with_uv; then
    # uv builds it with the switch pyproject.toml's [tool.uv] names (read
    # from this directory; named again here it would arrive twice, as a list,
    # and compile llama.cpp) and keeps that build in its cache apart from
    # builds with other settings.
    python_only && return
    uv pip install --quiet --python "$PY" --reinstall-package llama-cpp-python "llama-cpp-python==$VERSION"
    python_only || { echo "llama-cpp-python $VERSION went in with a llama.cpp of its own" >&2; exit 1; }
    return
  fi
  [ -n "${LAB_WHEELHOUSE:-}" ] && wheels="$(wheelhouse)"
  mkdir -p "$wheels" "$CACHE/wheels"
  lock "$CACHE/wheels/.python-only.lock"
  if ! ls "$wheels" | grep -q "^llama_cpp_python-$VERSION-"; then
    tarball=$(sdist)
    CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" \
      "$PY" -m pip wheel --quiet --no-deps --no-cache-dir -w "$wheels" "$tarball"
  fi
  # --force-reinstall: a llama-cpp-python that built its own llama.cpp would
  # satisfy the pin and keep its libraries beside ours.
  "$PY" -m pip install --quiet --no-deps --force-reinstall "$wheels"/llama_cpp_python-"$VERSION"-*.whl
  # Its dependencies (numpy, jinja2, diskcache) without reinstalling those present.
  "$PY" -m pip install --quiet "$wheels"/llama_cpp_python-"$VERSION"-*.whl
}

# llama-cpp-python $VERSION is installed and holds no llama.cpp of its own.
python_only() {
  "$PY" - "$VERSION" <<'EOF'
import importlib.metadata, sys
try:
    dist = importlib.metadata.distribution("llama-cpp-python")
except importlib.metadata.PackageNotFoundError:
    sys.exit(1)
compiled = [f for f in dist.files or [] if ".so" in f.name or f.name.endswith((".dylib", ".dll"))]
sys.exit(0 if dist.version == sys.argv[1] and not compiled else 1)
EOF
}

cpu_flags() {
  if [ -n "${CMAKE_ARGS:-}" ]; then echo "$CMAKE_ARGS"; return; fi
  # x86-64 Linux: AVX2/AVX-512 named explicitly instead of -march=native,
  # whose AMX kernels die with SIGILL on VMs that advertise AMX without
  # letting it run.
  if [ "$(uname -s)" = Linux ] && [ "$(uname -m)" = x86_64 ]; then
    local flags="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
    if grep -qw avx512f /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo && grep -qw avx512vl /proc/cpuinfo; then
      flags="$flags -DGGML_AVX512=ON"
      grep -qw avx512_vnni /proc/cpuinfo && flags="$flags -DGGML_AVX512_VNNI=ON"
      grep -qw avx512_bf16 /proc/cpuinfo && flags="$flags -DGGML_AVX512_BF16=ON"
    fi
    echo "$flags -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
  elif [ "$(uname -s)" = Darwin ]; then
    # The Metal shaders inside the library, as llama-cpp-python builds it:
    # the libraries are copied away from the build tree.
    echo "-DGGML_METAL=ON -DGGML_METAL_EMBED_LIBRARY=ON"
  fi
}

want_cuda() {
  case "${LAB_CUDA:-}" in
    1|on|ON|yes) return 0 ;;
    0|off|OFF|no) return 1 ;;
  esac
  # nvcc alone is not enough: CPU hosts often carry the toolkit, and a CUDA
  # build there takes far longer and cannot be tested.
  command -v nvcc >/dev/null && command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'
}

cuda_flags() {
  local arch="${LAB_CUDA_ARCH:-}"
  if [ -z "$arch" ] && command -v nvidia-smi >/dev/null; then
    arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d ' .' | sort -u | paste -sd';' -)
  fi
  echo "-DGGML_CUDA=ON${arch:+ -DCMAKE_CUDA_ARCHITECTURES=$arch}"
}

build_dir_flags() {
  local flags
  flags="$(cpu_flags)"
  if want_cuda && [[ "$flags" != *GGML_CUDA* ]]; then flags="$flags $(cuda_flags)"; fi
  echo "$flags"
}

# Configured again whenever the arguments differ from the last configure
# (a newer script): only what they touch recompiles.
configure() {
  local src="$1" build="$2" flags="$3" gen=() rpath='$ORIGIN' args
  command -v ninja >/dev/null && gen=(-G Ninja)
  [ "$(uname -s)" = Darwin ] && rpath='@loader_path'
  args="$src|$flags|$LLAMA_RELEASE|$LLAMA_COMMIT|$rpath"
  if [ -f "$build/CMakeCache.txt" ] && [ "$(cat "$build/configure.args" 2>/dev/null)" = "$args" ]; then
    return
  fi
  # Tools are configured from the start (configuring costs seconds) so that
  # adding them later compiles their own sources and nothing else. No tests,
  # examples, web UI download or HTTPS: the lab talks to the server locally.
  # shellcheck disable=SC2086
  cmake -S "$src" -B "$build" ${gen[@]+"${gen[@]}"} \
    -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    "-DLLAMA_BUILD_NUMBER=$LLAMA_RELEASE" "-DLLAMA_BUILD_COMMIT=$LLAMA_COMMIT" \
    -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON "-DCMAKE_INSTALL_RPATH=$rpath" \
    $flags >"$build/configure.log" 2>&1 || { tail -30 "$build/configure.log" >&2; exit 1; }
  printf '%s' "$args" >"$build/configure.args"
}

# Replace by rename, never by writing into the old file: a running server or
# Python process has the old library mapped.
place() {
  local from="$1" dir="$2" base
  base=$(basename "$from")
  cp -P "$from" "$dir/.$base.new"
  mv -f "$dir/.$base.new" "$dir/$base"
}

install_built() {
  local bin="$1" with_tools="$2" pkg lib scripts f
  pkg=$("$PY" -c 'import importlib.util, os; print(os.path.dirname(importlib.util.find_spec("llama_cpp").origin))')
  lib="$pkg/lib"
  scripts=$("$PY" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
  mkdir -p "$lib"
  for f in "$bin"/lib*.so* "$bin"/lib*.dylib; do
    [ -e "$f" ] || [ -L "$f" ] || continue
    place "$f" "$lib"
  done
  if [ "$with_tools" = 1 ]; then
    for f in "${TOOLS[@]}"; do
      place "$bin/$f" "$lib"
      ln -sfn "$lib/$f" "$scripts/$f"
    done
  fi
}

flags=$(build_dir_flags)
# `flags`: what this machine would be built with, and nothing done.
[ "$WHAT" = flags ] && { echo "$flags"; exit 0; }
[ -x "$PY" ] || { echo "no virtualenv at $VENV: run scripts/setup.sh first" >&2; exit 1; }
case "$WHAT/$MODE" in python/|lib/|tools/) install_python ;; esac
[ "$WHAT" = python ] && exit 0

src="$CACHE/src/llama_cpp_python-$VERSION"
mkdir -p "$CACHE/src"
lock "$CACHE/src/.lock"
if [ ! -f "$src/.complete" ]; then
  tarball=$(sdist)
  rm -rf "$src" && mkdir -p "$src"
  # docs, media, benches and test models are a third of the download and no
  # part of the build.
  tar -xzf "$tarball" -C "$src" --strip-components=1 \
    --exclude='*/vendor/llama.cpp/docs' --exclude='*/vendor/llama.cpp/media' \
    --exclude='*/vendor/llama.cpp/benches' --exclude='*/vendor/llama.cpp/models/*.gguf'
  touch "$src/.complete"
fi
[ "$WHAT" = source ] && exit 0

gen=make; command -v ninja >/dev/null && gen=ninja
key=$(printf '%s' "$VERSION|$flags|$gen|$(uname -sm)" | digest)
root="$CACHE/llama.cpp"
build="$root/$key"
mkdir -p "$build"
lock "$root/$key.lock"
printf '%s\n' "$flags" >"$build/flags.txt"
configure "$src/vendor/llama.cpp" "$build" "$flags"

targets=(llama)
[ "$WHAT" = tools ] && targets+=("${TOOLS[@]}")
jobs="${CMAKE_BUILD_PARALLEL_LEVEL:-$(cores)}"
case "$flags" in
  *GGML_CUDA=ON*) kind="CUDA" ;;
  *GGML_METAL=ON*) kind="Metal" ;;
  *) kind="CPU" ;;
esac
if [ "$WHAT" = tools ]; then
  what="the llama.cpp library and tools (${TOOLS[*]})"
  estimate="about 10 min on 2 cores the first time, half that when the library is built"
else
  what="the llama.cpp library"
  estimate="about 4 min on 2 cores the first time"
fi
# Built already (the tools' binaries exist, the library is up to date): say
# nothing. The server's web-UI step always reruns, so ninja is asked about the
# library alone.
built=1
for f in "${targets[@]:1}"; do [ -x "$build/bin/$f" ] || built=0; done
if [ "$built" = 1 ] && [ "$gen" = ninja ] && ninja -C "$build" -n llama 2>/dev/null | grep -q "no work to do"; then
  :
else
  echo "building $what for $kind from llama-cpp-python $VERSION's source ($estimate; cached in $build)"
fi
start=$SECONDS
if ! cmake --build "$build" --parallel "$jobs" --target "${targets[@]}" >"$build/build.log" 2>&1; then
  tail -40 "$build/build.log" >&2
  echo "llama.cpp build failed; full log: $build/build.log" >&2
  exit 1
fi
[ $((SECONDS - start)) -lt 2 ] || echo "llama.cpp build done in $((SECONDS - start)) s"
[ "$MODE" = --compile ] && exit 0
with_tools=0
[ "$WHAT" = tools ] && with_tools=1
install_built "$build/bin" "$with_tools"
