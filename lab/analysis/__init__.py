"""Reading a saved run: summaries (:mod:`.run`), measured acceptance, the
prediction and its checks, statistics, equivalence, the roofline, category
tables and the diff of two runs. Everything here works on saved rows and
returns tables and figures; the words are :mod:`lab.render`'s.
"""
