#!/usr/bin/env bash
# The installed environment, kept per machine so that a fresh checkout does
# not install the same packages again (scripts/setup.sh uses it).
#
#   bash scripts/venv_cache.sh key EXTRAS         # prints the key of this set-up
#   bash scripts/venv_cache.sh restore KEY VENV   # copies the kept one to VENV (exit 1: none)
#   bash scripts/venv_cache.sh save KEY VENV      # keeps VENV under KEY
#
# The key is what decides the packages: pyproject.toml, the set-up scripts,
# the extras, the Python and the wheelhouse. A kept environment older than
# LAB_VENV_CACHE_DAYS days (default 7) is not used, so that new releases of
# unpinned dependencies still arrive; LAB_VENV_CACHE=0 turns the cache off.
# The copy is made before llama.cpp's libraries are placed into it, and the
# project itself is installed again into each copy (it points at its checkout).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/speclab/venvs"
DAYS="${LAB_VENV_CACHE_DAYS:-7}"
KEEP=2  # kept environments (about 4 GB each with every extra)

off() { [ "${LAB_VENV_CACHE:-1}" = 0 ]; }

case "${1:-}" in
  key)
    {
      cat pyproject.toml scripts/setup.sh scripts/build_llama.sh scripts/venv_cache.sh
      echo "extras=${2:?extras}"
      "${PYTHON:-python3}" -c 'import sys, platform; print(sys.version, sys.executable, platform.machine())'
      echo "wheelhouse=${LAB_WHEELHOUSE:-}"
    } | sha256sum | cut -c1-16
    ;;
  restore)
    key="${2:?key}" venv="${3:?venv}"
    entry="$ROOT/$key"
    off && exit 1
    [ -f "$entry/origin" ] || exit 1
    if [ -n "$(find "$entry/origin" -mtime "+$DAYS")" ]; then
      echo "venv cache: $key is older than $DAYS days; installing afresh" >&2
      exit 1
    fi
    [ ! -e "$venv" ] || { echo "venv cache: $venv exists; not replacing it" >&2; exit 1; }
    tmp="$venv.restoring.$$"
    trap 'rm -rf "$tmp"' EXIT
    mkdir -p "$(dirname "$venv")"
    cp -a "$entry/venv" "$tmp"
    old="$(cat "$entry/origin")"
    new="$(cd "$(dirname "$venv")" && pwd)/$(basename "$venv")"
    # scripts' #! lines, the activate scripts and pyvenv.cfg name the place
    # the environment was installed in; compiled modules fix their own paths
    # (grep says 2 for what it cannot read: bin/ holds directories and links)
    { grep -lIF "$old" "$tmp"/bin/* "$tmp/pyvenv.cfg" 2>/dev/null || true; } | while IFS= read -r f; do
      sed -i "s|$old|$new|g" "$f"
    done
    mv "$tmp" "$venv"
    trap - EXIT
    touch "$entry/used"
    echo "venv cache: the environment of $key copied into $venv" >&2
    ;;
  save)
    key="${2:?key}" venv="${3:?venv}"
    off && exit 0
    mkdir -p "$ROOT"
    entry="$ROOT/$key"
    tmp="$ROOT/.saving.$key.$$"
    trap 'rm -rf "$tmp"' EXIT
    mkdir -p "$tmp"
    cp -a "$venv" "$tmp/venv"
    (cd "$venv" && pwd) > "$tmp/origin"
    touch "$tmp/used"
    rm -rf "$entry"
    # -T: should another set-up have kept the same key meanwhile, keep theirs
    mv -T "$tmp" "$entry" 2>/dev/null || rm -rf "$tmp"
    trap - EXIT
    # the most recently used ones stay
    for d in "$ROOT"/*/; do
      echo "$(stat -c %Y "$d/used" 2>/dev/null || echo 0) $d"
    done | sort -rn | tail -n "+$((KEEP + 1))" | cut -d' ' -f2- | while IFS= read -r old; do rm -rf "$old"; done
    echo "venv cache: kept as $key" >&2
    ;;
  *)
    echo "usage: venv_cache.sh key EXTRAS | restore KEY VENV | save KEY VENV" >&2
    exit 2
    ;;
esac
