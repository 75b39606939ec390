"""The drift guard (lab.analysis.drift) and the warm_rounds profile key, on
rows and profiles written here: no engine."""

from __future__ import annotations

from typing import Any

import pytest

from lab.analysis import drift
from lab.profile.errors import ProfileError
from lab.profile.load import parse_profile
from lab.render.report import render_markdown


def _rows(arm: str, tps: list[float], drafted: list[int] | None, warm: bool = False) -> list[dict[str, Any]]:
    base = arm == "base"
    return [{"arm": arm, "prompt": "p", "round": i + 1, "status": "ok", "tok_per_s": t,
             "drafted": None if drafted is None else drafted[i], "is_baseline": base,
             "baseline_arm": None if base else "base", "warm": warm} for i, t in enumerate(tps)]


def test_a_climb_beyond_the_noise_is_flagged_and_repeats_are_not() -> None:
    base = _rows("base", [70.0, 72.1, 71.0], None)
    climbing = _rows("spec", [137.0, 173.9, 226.2], [242, 373, 392])
    found = drift.round_drift(base + climbing)
    assert [(d.arm, [t.metric for t in d.trends]) for d in found] == [("spec", ["tok/s", "drafted"])]
    assert found[0].trends[0].change == pytest.approx(226.2 / 137.0 - 1)
    # flat drafted counts and tok/s within the baseline's noise: repeats
    assert drift.round_drift(base + _rows("spec", [137.0, 139.0, 140.5], [242, 242, 242])) == []
    # not monotone: noise, however wide
    assert drift.round_drift(base + _rows("spec", [137.0, 226.0, 140.0], [165, 463, 253])) == []


def test_drafted_counts_that_climb_then_hold_are_a_trend() -> None:
    # an n-gram table that learns the whole answer in round 1 drafts the same from round 2 on
    base = _rows("base", [61.5, 63.5, 62.1], None)
    found = drift.round_drift(base + _rows("spec", [54.4, 81.0, 79.5], [16, 35, 35]))
    assert [(d.arm, [t.metric for t in d.trends]) for d in found] == [("spec", ["drafted"])]
    assert found[0].trends[0].values == (16.0, 35.0, 35.0)
    # tok/s still needs a strict trend: timing repeats only within its noise
    assert drift.round_drift(base + _rows("spec", [54.4, 81.0, 81.0], [35, 35, 35])) == []


def test_a_set_acceptance_draws_anew_each_round_so_its_drafted_counts_are_no_trend() -> None:
    # set acceptance: every round draws its own keeps, so the steps and the drafted counts differ
    base = _rows("base", [303.5, 303.4], None)
    spec = _rows("spec", [283.9, 253.5], [275, 310])
    assert [d.arm for d in drift.round_drift(base + spec)] == ["spec"]
    for r in spec:
        r["set_acceptance"] = {"kind": "rate", "value": 0.8}
    assert drift.round_drift(base + spec) == []
    # its tok/s still trends where three rounds climb beyond the noise
    climbing = _rows("spec", [137.0, 173.9, 226.2], [242, 373, 392])
    for r in climbing:
        r["set_acceptance"] = {"kind": "rate", "value": 0.8}
    found = drift.round_drift(_rows("base", [70.0, 72.1, 71.0], None) + climbing)
    assert [(d.arm, [t.metric for t in d.trends]) for d in found] == [("spec", ["tok/s"])]


def test_drafted_counts_trend_over_two_rounds_tok_s_needs_three() -> None:
    base = _rows("base", [70.0, 90.0], None)
    found = drift.round_drift(base + _rows("spec", [100.0, 150.0], [100, 200]))
    assert [[t.metric for t in d.trends] for d in found] == [["drafted"]]


def _profile(warm: str) -> str:
    return (f'[run]\nrounds = 3\nwarm_rounds = {warm}\n[[prompts]]\nname = "p"\ntext = "a"\n'
            '[[arms]]\nname = "base"\nbackend = "llamacpp-server"\nmodel = "embedded:smollm2"\n')


def test_warm_rounds_is_a_checked_run_key() -> None:
    assert parse_profile(_profile("true"), "p.toml", None).run.warm_rounds is True
    assert parse_profile(_profile("false"), "p.toml", None).run.warm_rounds is False
    with pytest.raises(ProfileError) as err:
        parse_profile(_profile('"yes"'), "p.toml", None)
    assert "p.toml:3" in str(err.value) and "warm_rounds" in str(err.value)


def test_the_report_says_warm_and_shows_the_trend_not_an_interval() -> None:
    rows = _rows("base", [70.0, 72.0, 71.0], None, warm=True) + _rows("spec", [137.0, 173.9, 226.2], [242, 373, 392], warm=True)
    for r in rows:
        r.update(backend="b", drafter=None, n_tokens=10, speedup=None if r["is_baseline"] else r["tok_per_s"] / 71.0,
                 accepted=r["drafted"], text="x", identical_to_baseline=None if r["is_baseline"] else True)
    from lab.base.events import Status
    from lab.base.row import ResultRow

    full = [{**ResultRow(arm="a", backend="b", drafter=None, prompt="p", round=1, status=Status.OK).to_json(), **r} for r in rows]  # type: ignore[arg-type]
    md = render_markdown({"profile": {"name": "t", "run": {"rounds": 3}}, "results": full})
    assert "Rounds: warm" in md
    assert "rounds are not repeats: **spec** / p: later rounds faster by 65 %" in md
    assert "warm rounds, tok/s 137.0 → 173.9 → 226.2, drafted/accepted 242/242 → 373/373 → 392/392" in md
    assert "paired rounds" not in md
