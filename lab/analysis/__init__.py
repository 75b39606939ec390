"""Analysis that explains a verdict: step economics and break-even
(:mod:`.breakeven`), per-position acceptance (:mod:`.acceptance`), the
prediction from a verify-cost probe (:mod:`.predict`), statistics over rounds
(:mod:`.stats`), greedy equivalence (:mod:`.equivalence`), the bandwidth
roofline (:mod:`.roofline`) and the diff of two saved runs (:mod:`.compare`).

Everything here works on saved rows and plain numbers: no engine, no UI.
"""
