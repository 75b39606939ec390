"""Measuring verify cost T(w): the driver that loads a backend, measures,
plans which probes a run needs and caches them (:mod:`.driver`), and the
target a ``lab probe`` command names (:mod:`.target`). The curve type and
its file are :mod:`lab.base.probe`."""
