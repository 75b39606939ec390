"""speclab: a terminal lab for speculative decoding.

The packages, bottom to top; each imports only from the layers below it
(tests/test_layers.py reads every import and holds them to this):

- base (:mod:`lab.base`): facts with no policy: statuses and run events,
  the result row and its schema, metric formulas and step economics, the
  profile and probe data types, machine facts, text safety, strict JSON.
- contract (:mod:`lab.api`, :mod:`lab.hookspecs`): everything a backend or
  drafter plugin implements or may declare, and the hooks it registers by.
- kit (:mod:`lab.kit`): what plugins may use: the speculative loop, prompt
  rendering, model references, doctor checks.
- services: the plugin registry (:mod:`lab.registry`), profiles and suites
  (:mod:`lab.profile`, :mod:`lab.suites`), telemetry (:mod:`lab.telemetry`),
  building and checking rows (:mod:`lab.rows`), the run directory
  (:mod:`lab.store`), the drafter scaffold (:mod:`lab.scaffold`).
- orchestration: the runner (:mod:`lab.runner`), the verify-cost probe
  driver (:mod:`lab.probing`), the lossless sampler (:mod:`lab.lossless`).
- reading a run (:mod:`lab.analysis`): summaries, statistics, predictions.
- rendering (:mod:`lab.render`): every line of a report.
- faces: the ``lab`` command (:mod:`lab.cli`) and the TUI (:mod:`lab.tui`).

Built-in plugins live beside the core in ``plugins/`` and use only base,
the contract and the kit, never each other.
"""

__version__ = "0.1.0"
