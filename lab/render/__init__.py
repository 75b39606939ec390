"""Every line of a report: report.md, CSV and JSON (:mod:`.report`) and its
sections (categories, conditions, divergence, latency, lossless, serving,
GPU), and ``lab report --compare`` (:mod:`.compare`). Figures come from
:mod:`lab.analysis`; nothing here measures or decides."""
