"""Reading a saved run: summaries per arm and prompt and what a row's
figures add up to (:mod:`.run`), per-position acceptance (:mod:`.acceptance`),
the prediction from a verify-cost probe (:mod:`.predict`), what passes cost
by kind beside the probe's figures for them (:mod:`.pass_kinds`), statistics over
rounds (:mod:`.stats`), greedy equivalence (:mod:`.equivalence`), the
bandwidth roofline (:mod:`.roofline`), per-category tables
(:mod:`.categories`), the lossless check's file (:mod:`.lossless_loader`)
and the diff of two saved runs (:mod:`.compare`). Step economics and
break-even are :mod:`lab.base.economics`.

Everything here works on saved rows and plain numbers and returns tables
and figures; the words and Markdown are :mod:`lab.render`'s.
"""
