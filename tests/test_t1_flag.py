"""The prediction's flag for a probe whose one-row pass and the run's own
baseline token were measured under different conditions (a loaded CPU)."""

from __future__ import annotations

from typing import Any

from lab.analysis.predict import t1_disagreement
from lab.base.probe import Probe


def _probe(t1_s: float) -> Probe:
    return Probe("llamacpp", "m", "timed", (1, 2, 4), ((t1_s, t1_s * 1.1, t1_s * 1.3),) * 3)


def _base(*tok_per_s: float) -> list[dict[str, Any]]:
    return [{"arm": "base", "prompt": "p", "round": i + 1, "status": "ok", "tok_per_s": t}
            for i, t in enumerate(tok_per_s)]


def test_a_probe_measured_under_other_load_is_flagged() -> None:
    # the loaded CPU: a 31.9 ms one-row pass against 44.6-50 ms baseline tokens
    note = t1_disagreement(_base(1 / 0.0446, 1 / 0.050, 1 / 0.048), _probe(0.0319))
    assert note is not None and "31.90 ms" in note and "48.00 ms" in note
    # the same probe against baseline tokens it was measured beside: no flag
    assert t1_disagreement(_base(1 / 0.0320, 1 / 0.0318, 1 / 0.0322), _probe(0.0319)) is None


def test_the_rounds_spread_widens_what_counts_as_agreement() -> None:
    # 10 % apart, rounds spread 25 %: within the noise the rounds themselves show
    assert t1_disagreement(_base(1 / 0.040, 1 / 0.044, 1 / 0.051), _probe(0.040)) is None
    # the same gap with tight rounds is flagged
    assert t1_disagreement(_base(1 / 0.0440, 1 / 0.0441, 1 / 0.0439), _probe(0.040)) is not None
    # nothing to compare: no flag
    assert t1_disagreement([], _probe(0.04)) is None


def test_the_note_sits_beside_the_prediction() -> None:
    from lab.render.report import _t1_notes

    results = _base(1 / 0.0446, 1 / 0.050) + [
        {"arm": "spec", "prompt": "p", "round": 1, "status": "ok", "baseline_arm": "base",
         "backend": "llamacpp", "model": "m"}]
    notes = _t1_notes(results, [{"arm": "spec", "prompt": "p"}], [_probe(0.0319)])
    assert len(notes) == 1 and notes[0].startswith("- ⚠ spec / p: the probe's one-row pass took 31.90 ms")


def test_arms_the_same_disagreement_touches_share_one_line() -> None:
    from lab.render.report import _t1_notes

    spec = {"prompt": "p", "round": 1, "status": "ok", "baseline_arm": "base", "backend": "llamacpp", "model": "m"}
    results = _base(1 / 0.0446, 1 / 0.050) + [{"arm": "a", **spec}, {"arm": "b", **spec}]
    notes = _t1_notes(results, [{"arm": "a", "prompt": "p"}, {"arm": "b", "prompt": "p"}], [_probe(0.0319)])
    assert len(notes) == 1 and notes[0].startswith("- ⚠ a, b / p: the probe's one-row pass took 31.90 ms")
