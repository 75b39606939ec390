#!/usr/bin/env bash
# Prints the Python the set-up builds on: PYTHON when given, else the newest
# python3.1x on PATH, else python3, the first that runs and is new enough.
# With none, it names what it found and the one command that installs a
# Python, and exits 1 (scripts/setup.sh stops there, before making anything).
#
#   bash scripts/find_python.sh          # the interpreter's path
#
# pyproject.toml asks for 3.10 or newer; names are tried up to 3.14, the
# newest the lock covers (torch, which the vllm extra brings, has no wheels
# past it). A clean Mac's python3 is the Command Line Tools' 3.9.
set -euo pipefail
MIN=10
NEWEST=14

# "3.12" from the interpreter itself: a name or a shim (pyenv's answer for a
# version it does not have) proves nothing until it runs.
version() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null; }

minor_of() {
  case "$1" in
    3.[0-9]|3.[0-9][0-9]) echo "${1#3.}" ;;
    *) echo -1 ;;
  esac
}

install_line() {
  case "$(uname -s)" in
    Darwin)
      if command -v brew >/dev/null 2>&1; then
        echo "brew install python@3.12"
      else
        echo "install Homebrew (the one-line installer on its home page), then: brew install python@3.12"
      fi
      ;;
    Linux)
      if command -v apt-get >/dev/null 2>&1; then
        echo "sudo apt-get install python3 python3-venv    (Debian 12, Ubuntu 22.04 or newer)"
      elif command -v dnf >/dev/null 2>&1; then
        echo "sudo dnf install python3.12"
      else
        echo "install your distribution's python3.12 package"
      fi
      ;;
    *) echo "install Python 3.12" ;;
  esac
}

refuse() {
  {
    echo "setup: speclab needs Python 3.$MIN or newer; $1"
    echo "  install one:  $(install_line)"
    echo "  or name one:  PYTHON=/path/to/python3.12 bash scripts/setup.sh ..."
  } >&2
  exit 1
}

if [ -n "${PYTHON:-}" ]; then
  v=$(version "$PYTHON") || refuse "PYTHON=$PYTHON does not run"
  [ "$(minor_of "$v")" -ge "$MIN" ] || refuse "PYTHON=$PYTHON is Python $v"
  command -v "$PYTHON"
  exit 0
fi

seen=""
for name in $(m=$NEWEST; while [ "$m" -ge "$MIN" ]; do echo "python3.$m"; m=$((m - 1)); done) python3; do
  path=$(command -v "$name" 2>/dev/null) || continue
  v=$(version "$path") || { seen="$seen, $name does not run"; continue; }
  minor=$(minor_of "$v")
  if [ "$minor" -ge "$MIN" ] && [ "$minor" -le "$NEWEST" ]; then
    echo "$path"
    exit 0
  fi
  if [ "$minor" -gt "$NEWEST" ]; then
    seen="$seen, $name is $v ($path; the lock covers up to 3.$NEWEST)"
  else
    seen="$seen, $name is $v ($path)"
  fi
done
refuse "${seen:+found: ${seen#, }}${seen:-no python3 on PATH}"
