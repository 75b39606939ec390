"""The lab's bottom layer: types and formulas every other package shares,
with nothing above them imported (no engine, no plugin, no file format
beyond their own).

- :mod:`.cells` statuses and the cell a figure belongs to;
- :mod:`.events` what a run emits (tokens, steps, phases, finished rows);
- :mod:`.row` the result row and the schema every key list derives from;
- :mod:`.metrics` the formulas of every figure; :mod:`.economics` a step's
  cost and yield, break-even; :mod:`.verdict` the call on a speedup;
- :mod:`.profile` and :mod:`.limits` the profile's data model and bounds;
- :mod:`.probe` the verify-cost curve and its file;
- :mod:`.rundir` a run directory's file names and the one reader of what
  the lab saved (plain or gzip, bounded, kept inside its directory);
- :mod:`.machine` cores, CPU name, cache paths; :mod:`.periodic` a timer
  thread; :mod:`.textsafe` and :mod:`.strictjson` safe text and JSON.
"""
