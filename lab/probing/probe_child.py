"""The probe's own process: ``python -m lab.probing.probe_child REQUEST
MODULES`` (started by :func:`lab.probing.isolated.obtain_isolated`; not a
command for users). It imports the engine's ``MODULES`` first
(:mod:`lab.base.native`), then measures as the isolated probe does."""

from __future__ import annotations

import sys

from lab.base.native import preload


def main(argv: list[str]) -> int:
    failed = preload(argv[1] if len(argv) > 1 else "")
    for line in failed:
        print(f"the engine's modules did not import first: {line}", flush=True)
    from lab.probing.isolated import main as measure

    return measure(argv[:1])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
