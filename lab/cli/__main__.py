"""``python -m lab.cli``: the ``lab`` command."""

import sys

from lab.cli import main

sys.exit(main())
