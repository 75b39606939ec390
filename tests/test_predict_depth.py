"""A run's probe times T(w) at two KV depths and each row reads it at its
own mean depth; a row's prediction carries the caveats that say why it may
miss (lab.analysis.caveats)."""

from __future__ import annotations

from typing import Any

import pytest

from lab.analysis import caveats, predict
from lab.analysis.measured_acceptance import PositionAcceptance
from lab.api import Probing
from lab.base.probe import DEEPER, Probe
from lab.probing import driver

# one repeat per depth: w = 1, 2, 5 rows; the deep passes slower, the wide ones more so
SHALLOW = (0.010, 0.015, 0.030)
DEEP = (0.012, 0.019, 0.042)


def _probe(deeper: Any = None, repeats: int = 1) -> Probe:
    notes: dict[str, Any] = {"prefix_tokens": 100}
    if deeper is not None:
        notes[DEEPER] = deeper
    return Probe("llamacpp", "m", "decode", (1, 2, 5), (SHALLOW,) * repeats, notes=notes)


def _two_depths() -> Probe:
    return _probe({"depth": 300, "seconds": [list(DEEP)]})


def test_a_row_reads_t_at_its_own_depth_linear_in_seconds_between_the_two() -> None:
    p = _two_depths()
    assert p.depth_span == (100, 300)
    assert p.t_ratio_at(5, 100) == pytest.approx(3.0)
    assert p.t_ratio_at(5, 300) == pytest.approx(3.5)
    # halfway: each width's seconds halfway (0.036 over 0.011), not the ratios' mean (3.25)
    assert p.t_ratio_at(5, 200) == pytest.approx(0.036 / 0.011)
    assert p.pass_seconds_at(1, 200) == pytest.approx(0.011)
    # past the deep depth the line carries on: 0.048 over 0.013
    assert p.t_ratio_at(5, 400) == pytest.approx(0.048 / 0.013)
    # between widths, linear as t_ratio is: T(3) at the deep depth
    assert p.t_ratio_at(3, 300) == pytest.approx((0.019 + (0.042 - 0.019) / 3) / 0.012)
    # no depth asked: the shallow curve, as before
    assert p.t_ratio_at(5, None) == p.t_ratio(5) == pytest.approx(3.0)


@pytest.mark.parametrize("deeper", [
    {"depth": 300, "seconds": [[0.012, 0.019]]},  # a width short
    {"depth": 300, "seconds": [list(DEEP), list(DEEP)]},  # more repeats than the shallow curve
    {"depth": 100, "seconds": [list(DEEP)]},  # not deeper
    {"depth": 300, "seconds": [[0.012, "x", 0.042]]},
    {"depth": -5, "seconds": [list(DEEP)]},
    {"seconds": [list(DEEP)]},
    "300",
])
def test_a_damaged_second_depth_reads_as_one_depth(deeper: Any) -> None:
    p = _probe(deeper)
    assert p.depth_span is None
    assert p.t_ratio_at(5, 200) == pytest.approx(3.0)
    assert p.pass_seconds_at(1, 200) == pytest.approx(0.010)


def test_a_line_that_falls_to_zero_is_not_read() -> None:
    # deep passes far faster than shallow ones (noise): extrapolating shallower reaches 0
    p = _probe({"depth": 300, "seconds": [[0.002, 0.003, 0.006]]})
    assert p.t_ratio_at(5, 0) == pytest.approx(3.0)


def _inputs(depth: float | None) -> predict.ArmInputs:
    return predict.ArmInputs(baseline_token_s=0.011, draft_s_per_token=0.0, plain_share=0.0, n_max=4, depth=depth)


def test_the_prediction_prices_t_at_the_rows_depth_and_says_so() -> None:
    every = PositionAcceptance((100, 100, 100, 100), (100, 100, 100, 100))
    p = _two_depths()
    at = predict.predict(every, p, _inputs(200.0), [4])[0]
    # five tokens a step over T(5) at depth 200, read linearly between widths 2 and 5 at that depth
    assert at.verify_cost == pytest.approx(0.036 / 0.011)
    assert at.speedup == pytest.approx(5 / (0.036 / 0.011))
    assert at.depth == 200.0
    # the same row priced by the shallow curve alone: the old, too cheap step
    flat = predict.predict(every, _probe(), _inputs(200.0), [4])[0]
    assert flat.speedup == pytest.approx(5 / 3.0) and flat.depth is None


def test_a_rows_depth_is_its_prompt_plus_half_its_output() -> None:
    rows = [{"prompt_tokens": 53, "n_tokens": 400}, {"prompt_tokens": 69, "n_tokens": 400}]
    assert predict.rows_depth(rows) == pytest.approx(261.0)
    assert predict.rows_depth([{"prompt_tokens": 53}]) is None
    assert predict.rows_depth([]) is None


def test_depth_is_noted_only_outside_the_probes_two_depths() -> None:
    rows = [{"status": "ok", "prompt_tokens": 1500, "n_tokens": 400}]
    p = _two_depths()
    note = predict.depth_disagreement(rows, p)
    assert note is not None and "1700" in note and "ran at 300" in note
    assert predict.depth_disagreement([{"status": "ok", "prompt_tokens": 50, "n_tokens": 300}], p) is None


class _Placing(Probing):
    probe_methods = ("decode",)
    probe_depth_methods = ("decode",)
    stack = "x"

    @staticmethod
    def probe_refusal(_options: Any) -> None:
        return None


class _Registry:
    def __init__(self, cls: type) -> None:
        self.cls = cls

    def backend(self, _name: str) -> type:
        return self.cls


def _arm(**over: Any) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(**({"name": "spec", "backend": "llamacpp", "model": "m", "options": {}, "n_max": 4,
                                "is_baseline": False} | over))


def test_plan_times_a_second_depth_past_the_cells_mean_unless_the_profile_names_one() -> None:
    specs, _ = driver.plan([_arm()], 2, _Registry(_Placing), None, (400, 400))  # type: ignore[arg-type]
    # the cell's length: with llama.cpp's 128-token prefix it brackets a cell after a short prompt
    assert specs[0].deeper == 400 and specs[0].depth is None
    # cells too short to leave the backend's prefix far behind: one depth, as before
    assert driver.deeper_depth(255) is None and driver.deeper_depth(256) == 256
    specs, _ = driver.plan([_arm()], 2, _Registry(_Placing), None, (24, 24))  # type: ignore[arg-type]
    assert specs[0].deeper is None
    specs, _ = driver.plan([_arm()], 2, _Registry(_Placing), 2048, (400, 400))  # type: ignore[arg-type]
    assert specs[0].deeper is None and specs[0].depth == 2048


def test_the_cache_tells_a_probe_of_two_depths_from_one(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from lab.base import probe as probes
    from lab.telemetry import bandwidth

    monkeypatch.setattr(bandwidth, "machine_identity", lambda: {"cpu": "test"})
    one = driver.ProbeSpec("llamacpp", "m", 2, {}, (1, 2, 5))
    two = driver.ProbeSpec("llamacpp", "m", 2, {}, (1, 2, 5), deeper=300)
    assert one.key() != two.key()
    probes.save(_probe(), driver.cache_path(two, tmp_path))
    # a one-depth curve saved under the two-depth key is not taken for one
    assert driver.cached(two, tmp_path) is None
    probes.save(driver.with_deeper(_probe(), Probe("llamacpp", "m", "decode", (1, 2, 5), (DEEP,), depth=300)),
                driver.cache_path(two, tmp_path))
    got = driver.cached(two, tmp_path)
    assert got is not None and got.depth_span == (100, 300)


def _row(arm: str, rnd: int, tps: float, contended: bool = False) -> dict[str, Any]:
    return {"arm": arm, "prompt": "p", "round": rnd, "status": "ok", "tok_per_s": tps, "contended": contended,
            "baseline_arm": None if arm == "base" else "base", "prompt_tokens": 50, "n_tokens": 400}


def test_a_quiet_tight_row_has_no_caveat_and_a_busy_or_loose_one_says_why() -> None:
    p = _two_depths()
    # baseline tokens of 11.5 ms: the probe's one-row pass at the rows' depth (250)
    quiet = [_row("base", 1, 87.0), _row("base", 2, 87.0), _row("spec", 1, 130.0), _row("spec", 2, 132.0)]
    assert caveats.for_row(quiet, [], "spec", "p", p) == []
    busy = [*quiet[:2], _row("spec", 1, 130.0, True), _row("spec", 2, 132.0)]
    assert [c.tag for c in caveats.for_row(busy, [], "spec", "p", p)] == ["busy"]
    loose = [*quiet[:2], _row("spec", 1, 104.0), _row("spec", 2, 140.0)]
    got = caveats.for_row(loose, [], "spec", "p", p)
    assert [c.tag for c in got] == ["rounds"] and "15%" in got[0].why


def test_holds_is_ten_percent_either_way() -> None:
    assert caveats.holds(1.10, 1.0) and caveats.holds(0.90, 1.0)
    assert not caveats.holds(1.12, 1.0) and not caveats.holds(0.88, 1.0)
    assert caveats.holds(None, 1.0) is None and caveats.holds(1.0, None) is None


def test_the_report_puts_a_rows_caveat_beside_its_prediction() -> None:
    from lab.render.report import _caveat_notes, _caveat_tags

    pred = {"arm": "spec", "prompt": "p", "caveats": [["busy", "2 of its 2 cells ran beside other work"],
                                                        ["clocks", "worded by its own note"]]}
    assert _caveat_tags(pred) == " ⚠ busy, clocks"
    assert _caveat_notes([pred]) == ["- ⚠ spec / p (busy): 2 of its 2 cells ran beside other work."]
    assert _caveat_tags({"caveats": []}) == ""
    # the same sentence for several rows is one line naming them
    other = {**pred, "arm": "other"}
    assert _caveat_notes([pred, other]) == ["- ⚠ spec / p, other / p (busy): 2 of its 2 cells ran beside other work."]
