"""The lab's bottom layer: types and formulas every other package shares
(cells and events, the result row and its schema, metrics, step economics
and verdicts, the profile and probe types, run-directory files, machine
facts, safe text and strict JSON), importing nothing above them."""
