"""``python -m lab.cli``: the ``lab`` command."""

import sys

from lab.cli import main

if __name__ == "__main__":
    sys.exit(main())
