#!/usr/bin/env bash
# Set up without a package index: carry a wheelhouse.
#
#   bash scripts/wheelhouse.sh fill DIR [EXTRAS]   # here, with index access
#   LAB_WHEELHOUSE=DIR bash scripts/setup.sh EXTRAS  # there, offline
#
# `fill` downloads, for the target interpreter (PY_VERSION, default this
# one's; PLATFORMS, default x86-64 manylinux), the wheels of every
# dependency of the extras (default llamacpp), the tools a set-up needs to
# build (pip, setuptools, wheel, scikit-build-core), and llama-cpp-python's
# source without its docs, media, benchmarks, test models and git history
# (about 11 MB instead of 76). Files are then grouped into DIR/carry-N/
# folders of at most CARRY_MB (default 60) so each folder fits one transfer;
# a file larger than that is cut into .partNN pieces.
#
# `pack FROM DIR` does the grouping alone, for files you add yourself.
# `flat DIR` prints a directory where DIR's files lie side by side, pieces
# joined again: what pip's --find-links reads. setup.sh calls it.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=0.3.36
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/speclab"

flat() {
  local dir out name path base prev=""
  dir=$(cd "$1" && pwd)
  out="$CACHE/wheelhouse/$(printf '%s' "$dir" | { if command -v sha256sum >/dev/null; then sha256sum; else shasum -a 256; fi; } | cut -c1-12)"
  mkdir -p "$out"
  while IFS= read -r -d '' path; do
    case "$path" in *.part[0-9][0-9]) continue ;; esac
    ln -sfn "$path" "$out/$(basename "$path")"
  done < <(find "$dir" -type f ! -name '.*' -print0)
  # Pieces may sit in different carry folders; sorted by name they come in
  # file order (two-digit suffixes).
  while IFS=$'\t' read -r name path; do
    base="${name%.part[0-9][0-9]}"
    [ -e "$out/$base" ] && continue
    if [ "$base" != "$prev" ]; then
      [ -z "$prev" ] || mv -f "$out/.$prev.new" "$out/$prev"
      prev="$base"
      : >"$out/.$base.new"
    fi
    cat "$path" >>"$out/.$base.new"
  done < <(find "$dir" -type f -name '*.part[0-9][0-9]' | while IFS= read -r path; do
              printf '%s\t%s\n' "$(basename "$path")" "$path"
            done | sort)
  [ -z "$prev" ] || mv -f "$out/.$prev.new" "$out/$prev"
  echo "$out"
}

requirements() {
  # The dependency lists in pyproject.toml, with the project's own extras
  # (all = speclab[llamacpp,mlx]) expanded.
  "$PYTHON" - "$1" <<'EOF'
import re, sys
try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = project["optional-dependencies"]
wanted, out, seen = [e for e in sys.argv[1].split(",") if e], list(project["dependencies"]), set()
while wanted:
    extra = wanted.pop()
    if extra in seen:
        continue
    seen.add(extra)
    for req in extras[extra]:
        m = re.match(r"speclab\[([^\]]+)\]", req)
        if m:
            wanted.extend(m.group(1).split(","))
        else:
            out.append(req)
print("\n".join(sorted(set(out))))
EOF
}

slim_sdist() {
  local dest="$1" tmp
  tmp=$(mktemp -d)
  "$PYTHON" -m pip download --quiet --no-deps --no-binary llama-cpp-python -d "$tmp" "llama-cpp-python==$VERSION"
  mkdir "$tmp/x"
  tar -xzf "$tmp/llama_cpp_python-$VERSION.tar.gz" -C "$tmp/x" \
    --exclude="llama_cpp_python-$VERSION/.git" --exclude="llama_cpp_python-$VERSION/vendor/llama.cpp/.git" \
    --exclude='*/vendor/llama.cpp/docs' --exclude='*/vendor/llama.cpp/media' \
    --exclude='*/vendor/llama.cpp/benches' --exclude='*/vendor/llama.cpp/models/*.gguf'
  tar -czf "$dest/llama_cpp_python-$VERSION.tar.gz" -C "$tmp/x" "llama_cpp_python-$VERSION"
  rm -rf "$tmp"
}

fill() {
  local dir="$1" extras="${2:-llamacpp}" staging pyv platforms=() p reqs=() req
  PYTHON="${PYTHON:-$(bash scripts/find_python.sh)}"
  pyv="${PY_VERSION:-$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')}"
  for p in ${PLATFORMS:-manylinux2014_x86_64 manylinux_2_17_x86_64 manylinux_2_24_x86_64 manylinux_2_28_x86_64 linux_x86_64}; do
    platforms+=(--platform "$p")
  done
  mkdir -p "$dir"
  staging=$(mktemp -d)
  echo "llama-cpp-python $VERSION source, slimmed..."
  slim_sdist "$staging"
  # Its Python code as a wheel too, so the offline side needs no build
  # backend for it (LLAMA_BUILD=OFF: no compiled code inside).
  CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" \
    "$PYTHON" -m pip wheel --quiet --no-deps -w "$staging" "$staging/llama_cpp_python-$VERSION.tar.gz"
  while IFS= read -r req; do reqs+=("$req"); done < <(requirements "$extras")
  echo "wheels for Python $pyv: ${reqs[*]}"
  "$PYTHON" -m pip download --quiet -d "$staging" --only-binary=:all: --python-version "$pyv" \
    --implementation cp ${platforms[@]+"${platforms[@]}"} --find-links "$staging" \
    ${reqs[@]+"${reqs[@]}"} pip "setuptools>=68" wheel "scikit-build-core>=0.9.2"
  pack "$staging" "$dir"
  rm -rf "$staging"
  echo "wheelhouse in $dir:"
  du -sh "$dir"/carry-* | sed 's/^/  /'
  echo "carry each carry-N folder; then: LAB_WHEELHOUSE=$dir bash scripts/setup.sh $extras"
}

# Greedy grouping into folders of at most CARRY_MB; big files cut first.
pack() {
  local from="$1" dir="$2" limit group=1 used=0 f size piece n
  limit=$(( ${CARRY_MB:-60} * 1024 * 1024 ))
  rm -rf "$dir"/carry-*
  mkdir -p "$dir/carry-1"
  while IFS= read -r f; do
    size=$(wc -c <"$f" | tr -d ' ')
    if [ "$size" -gt "$limit" ]; then
      # letters (aa, ab, ...) in file order, renamed to two digits: split's
      # digit suffixes are GNU's alone
      split -b "$limit" -a 2 "$f" "$f.part"
      rm "$f"
      n=0
      for piece in "$f".part[a-z][a-z]; do
        mv "$piece" "$f.part$(printf '%02d' "$n")"
        n=$((n + 1))
      done
    fi
  done < <(find "$from" -maxdepth 1 -type f)
  while IFS= read -r f; do
    size=$(wc -c <"$f" | tr -d ' ')
    if [ $((used + size)) -gt "$limit" ] && [ "$used" -gt 0 ]; then
      group=$((group + 1)); used=0; mkdir -p "$dir/carry-$group"
    fi
    mv "$f" "$dir/carry-$group/"
    used=$((used + size))
  done < <(find "$from" -maxdepth 1 -type f | while IFS= read -r f; do
             echo "$(wc -c <"$f" | tr -d ' ') $f"
           done | sort -rn | cut -d' ' -f2-)
}

case "${1:-}" in
  fill) shift; fill "$@" ;;
  flat) shift; flat "$1" ;;
  pack) shift; pack "$1" "$2" ;;
  *) echo "usage: $0 fill DIR [EXTRAS] | flat DIR | pack FROM DIR" >&2; exit 2 ;;
esac
