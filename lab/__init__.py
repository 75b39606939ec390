"""speclab: a terminal lab for speculative decoding.

Packages bottom to top, each importing only the layers below it (declared
and checked in tests/test_layers.py): base (types and formulas), the
contract (:mod:`lab.api`, :mod:`lab.hookspecs`), the kit plugins may use,
services (registry, profiles, suites, telemetry, rows, store), orchestration
(runner, probe driver, lossless sampler), analysis, rendering, and the faces
(:mod:`lab.cli`, :mod:`lab.tui`). Built-in plugins in ``plugins/`` use only
base, the contract and the kit, never each other."""

__version__ = "0.1.0"
