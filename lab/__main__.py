"""``python -m lab``: the ``lab`` command."""

import sys

from lab.cli import program

if __name__ == "__main__":
    sys.exit(program())
