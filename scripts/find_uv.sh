#!/usr/bin/env bash
# Prints the uv the set-up installs with: UV when given, else `uv` on PATH,
# else the one kept in speclab's cache, each only when it is as new as
# pyproject.toml's [tool.uv] required-version asks; with none, installs uv
# there from the package index with PYTHON's pip and prints that one.
#
#   bash scripts/find_uv.sh PYTHON
#
# The kept one is a small virtualenv of its own (about 40 MB): uv is one
# executable, and a virtualenv is the one place every Python can pip-install
# into (Homebrew's and Debian's refuse installs outside one).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${1:?usage: find_uv.sh PYTHON}"
TOOL="${XDG_CACHE_HOME:-$HOME/.cache}/speclab/uv"
MIN=$(sed -n 's/^required-version = ">=\([0-9.]*\)".*/\1/p' pyproject.toml)
[ -n "$MIN" ] || { echo "find_uv: no required-version in pyproject.toml's [tool.uv]" >&2; exit 2; }

# 0 when version $1 >= $2 (dotted numbers).
at_least() {
  local a b i
  IFS=. read -r -a a <<<"$1"
  IFS=. read -r -a b <<<"$2"
  for i in 0 1 2; do
    [ "${a[i]:-0}" -gt "${b[i]:-0}" ] && return 0
    [ "${a[i]:-0}" -lt "${b[i]:-0}" ] && return 1
  done
  return 0
}

usable() {
  local out v
  out=$("$1" --version 2>/dev/null) || return 1
  v=$(echo "$out" | sed -n 's/^uv \([0-9][0-9.]*\).*/\1/p')
  [ -n "$v" ] || return 1
  if at_least "$v" "$MIN"; then return 0; fi
  echo "setup: $1 is uv $v; the lock needs $MIN or newer" >&2
  return 1
}

if [ -n "${UV:-}" ]; then
  usable "$UV" || { echo "setup: UV=$UV is not a uv $MIN or newer" >&2; exit 1; }
  echo "$UV"
  exit 0
fi
found=$(command -v uv 2>/dev/null || true)
if [ -n "$found" ] && usable "$found"; then echo "$found"; exit 0; fi
if [ -x "$TOOL/bin/uv" ] && usable "$TOOL/bin/uv"; then echo "$TOOL/bin/uv"; exit 0; fi

echo "setup: installing uv into $TOOL (once per machine)" >&2
tmp="$TOOL.new.$$"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$(dirname "$TOOL")"
if ! "$PYTHON" -m venv "$tmp" >&2 || ! "$tmp/bin/python" -m pip install --quiet --disable-pip-version-check "uv>=$MIN" >&2; then
  {
    echo "setup: could not install uv with $PYTHON."
    echo "  install it yourself (macOS: brew install uv), or set up with pip: LAB_INSTALLER=pip bash scripts/setup.sh ..."
  } >&2
  exit 1
fi
# uv is a native executable: the virtualenv's paths do not matter once moved.
rm -rf "$TOOL"
mv "$tmp" "$TOOL"
trap - EXIT
usable "$TOOL/bin/uv" || exit 1
echo "$TOOL/bin/uv"
