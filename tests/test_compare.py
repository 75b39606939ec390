"""`lab report A --compare B`: the warnings that come before the cells
(profiles that differ, a baseline that moved beyond its noise) and cells
that were stopped rather than measured."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lab.analysis.compare import compare, conclusion, profile_differences, warnings
from lab.base.events import Status
from lab.base.row import RESULT_KEYS
from lab.cli import main
from lab.render.compare import render_compare
from lab.store import SCHEMA_VERSION


def _row(arm: str, rnd: int, status: str = "ok", tok_per_s: float | None = None, **kw: Any) -> dict[str, Any]:
    row: dict[str, Any] = {k: None for k in RESULT_KEYS}
    row.update(arm=arm, backend="llamacpp", drafter=None, prompt="prose", round=rnd, status=status,
               tok_per_s=tok_per_s, verdict="", is_baseline=arm == "base", detail="")
    row.update(kw)
    return row


def _spec(rnd: int, tok_per_s: float, base: float, status: str = "ok") -> dict[str, Any]:
    if status != "ok":
        return _row("spec", rnd, status, drafter="ngram", baseline_arm="base", detail=status)
    return _row("spec", rnd, tok_per_s=tok_per_s, drafter="ngram", baseline_arm="base", speedup=tok_per_s / base,
                steps=40, drafted=120, accepted=60, acceptance_rate=0.5, mean_accepted_len=2.5,
                step_s=2.0 / base, step_cost_tokens=2.0, max_yield=4, n_max=3)


def _data(base_tps: list[float], spec_tps: list[float], *, max_tokens: int = 64, extra_arm: bool = False,
          spec_status: str = "ok") -> dict[str, Any]:
    arms = [{"name": "base", "backend": "llamacpp", "model": "embedded:smollm2", "drafter": None, "n_max": None,
             "is_baseline": True, "options": {}, "drafter_options": {}, "baseline": None},
            {"name": "spec", "backend": "llamacpp", "model": "embedded:smollm2", "drafter": "ngram", "n_max": 3,
             "is_baseline": False, "options": {}, "drafter_options": {}, "baseline": "base"}]
    if extra_arm:
        arms.append({**arms[1], "name": "other"})
    results = [_row("base", i + 1, tok_per_s=t) for i, t in enumerate(base_tps)]
    results += [_spec(i + 1, t, base_tps[i], spec_status) for i, t in enumerate(spec_tps)]
    return {
        "schema": SCHEMA_VERSION, "started": "2026-12-01T10:00:00+0000",
        "profile": {"name": "p", "run": {"max_tokens": max_tokens, "rounds": len(base_tps)},
                    "prompts": [{"name": "prose", "text": "Write.", "file": None, "system": None}], "arms": arms},
        "results": results,
    }


def test_a_baseline_that_moved_beyond_its_noise_is_a_change_and_a_warning() -> None:
    a = _data([100.0, 102.0], [150.0, 151.0])
    b = _data([296.0, 300.0], [300.0, 302.0])
    rows = {r["arm"]: r for r in compare(a, b)}
    # the baseline's move is timing, said as such; the cell itself did not change
    assert rows["base"]["timing"] == ["tok/s"] and rows["base"]["changed"] == [], rows["base"]
    assert rows["base"]["tok_per_s_change"] > 1.9
    said = warnings(a, b)
    assert any(w.startswith("baseline base on prose moved +1") for w in said), said
    md = render_compare(a, b, "md")
    assert "**warning:** baseline base" in md
    assert "tok/s moved (timing)" in md.split("| base | prose |")[1].splitlines()[0].rsplit("|", 2)[1]


def test_moves_inside_the_rounds_spread_are_noise() -> None:
    a = _data([100.0, 120.0], [150.0, 170.0])  # a 20 % spread of its own
    b = _data([112.0, 116.0], [158.0, 160.0])
    rows = {r["arm"]: r for r in compare(a, b)}
    assert "tok/s" not in rows["base"]["changed"]
    assert not [w for w in warnings(a, b) if w.startswith("baseline")]


def test_profiles_that_differ_are_said_before_the_cells() -> None:
    a = _data([100.0], [150.0])
    b = _data([100.0], [150.0], max_tokens=400, extra_arm=True)
    diffs = profile_differences(a, b)
    assert any("only in B: other" in d for d in diffs), diffs
    assert any("max_tokens 64 → 400" in d for d in diffs), diffs
    doc = json.loads(render_compare(a, b, "json"))
    assert any("not like for like" in w for w in doc["warnings"])
    assert profile_differences(a, a) == [] and warnings(a, a) == []


def test_stopped_cells_are_not_failures_nor_verdict_changes() -> None:
    for status in (Status.CANCELLED, Status.SKIPPED):
        a = _data([100.0], [150.0])
        b = _data([100.0], [150.0], spec_status=status.value)
        spec = next(r for r in compare(a, b) if r["arm"] == "spec")
        assert spec["verdict_kind_b"] == status.value
        assert spec["changed"] == ["not measured in B"]
        md = render_compare(a, b, "md")
        assert "failed" not in md


def test_cli_compare_prints_the_warnings(tmp_path: Path, capsys: Any) -> None:
    for name, data in (("a", _data([100.0], [150.0])), ("b", _data([300.0], [310.0], max_tokens=32))):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(data))
    assert main(["report", str(tmp_path / "a"), "--compare", str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "max_tokens 100" not in out and "max_tokens 64 → 32" in out
    assert "baseline base on prose moved +200%" in out
    assert main(["report", str(tmp_path / "a"), "--compare", str(tmp_path / "b"), "--format", "csv"]) == 0
    captured = capsys.readouterr()
    assert "warning" in captured.err and "arm,prompt" in captured.out


def test_the_report_lists_stopped_cells_apart_from_failures() -> None:
    from lab.render.report import render

    data = _data([100.0, 101.0], [150.0, 151.0], spec_status=Status.SKIPPED.value)
    data["results"].append(_row("spec", 3, Status.CANCELLED.value, detail="cancelled"))
    data["results"].append(_row("base", 3, Status.OOM.value, detail="out of memory"))
    md = render(data, "md")
    failures = md.split("## Failures")[1].split("##")[0]
    stopped = md.split("## Not measured")[1].split("##")[0]
    assert "**base** oom: out of memory" in failures and "spec" not in failures
    assert "**spec** skipped (2 cells)" in stopped and "**spec** cancelled" in stopped


# -- the conclusion, and changes counted only beyond both runs' noise ---------------------------

DEMO = Path(__file__).resolve().parents[1] / "results" / "demo-predictions-cpu"


def _demo() -> dict[str, Any]:
    from lab.store import load_run

    return load_run(DEMO)


def _scaled(data: dict[str, Any], factor: float, arm: str | None = None, prompt: str | None = None) -> dict[str, Any]:
    """A copy of a run whose tok/s (of one arm and prompt, or of every row)
    moved by ``factor``, with the speedups the rows would then carry."""
    import copy

    out = copy.deepcopy(data)
    for r in out["results"]:
        if (arm is None or r["arm"] == arm) and (prompt is None or r["prompt"] == prompt) and r["tok_per_s"]:
            r["tok_per_s"] *= factor
            if r.get("speedup") is not None and arm is not None:
                r["speedup"] *= factor
    return out


def test_a_run_against_a_copy_of_itself_changes_nothing_and_warns_of_nothing(tmp_path: Path, capsys: Any) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(DEMO, copy)
    assert main(["report", str(DEMO), "--compare", str(copy)]) == 0
    out = capsys.readouterr().out
    assert "**Conclusion:** acceptance unchanged; timing within both runs' noise: no change in kind." in out
    assert "0 of 8 shared cells changed" in out
    assert "warning" not in out and "different machines" not in out
    data = _demo()
    assert warnings(data, _demo()) == [] and not any(r["changed"] for r in compare(data, _demo()))


def test_timing_that_moved_with_the_machine_is_no_change_in_kind() -> None:
    a = _demo()
    b = _scaled(a, 0.7)  # the whole machine 30 % slower: baseline and arms alike
    rows = compare(a, b)
    assert not any(r["changed"] for r in rows), [(r["arm"], r["prompt"], r["changed"]) for r in rows]
    assert conclusion(a, b, rows) == ("acceptance unchanged; timing moved with the machine (baselines: "
                                      "baseline / prose -30%, baseline / code -30%): no change in kind.")
    md = render_compare(a, b, "md")
    assert md.index("**Conclusion:**") < md.index("**warning:**") < md.index("| arm |")
    assert "0 of 8 shared cells changed" in md


def test_a_change_in_kind_beyond_both_runs_noise_leads_the_comparison() -> None:
    a = _demo()
    b = _scaled(a, 0.6, "ngram", "code")  # 1.37x → 0.82x: pays → loses
    rows = {(r["arm"], r["prompt"]): r for r in compare(a, b)}
    assert rows[("ngram", "code")]["changed"] == ["speedup", "verdict"]
    assert sum(1 for r in rows.values() if r["changed"]) == 1
    said = conclusion(a, b)
    assert said == ("acceptance unchanged; timing within both runs' noise: ngram / code changed in kind: "
                    "pays → loses, beyond both runs' noise.")


def test_a_move_inside_either_runs_paired_spread_is_not_counted() -> None:
    a = _data([100.0, 100.0], [101.0, 105.0])  # 1.01x and 1.05x: pays by its median, break-even in one pair
    b = _data([100.0, 100.0], [100.5, 101.5])  # break-even
    spec = next(r for r in compare(a, b) if r["arm"] == "spec")
    assert spec["verdict_kind_a"] != spec["verdict_kind_b"]
    assert spec["changed"] == [] and spec["within_noise"] == ["verdict"]
    assert "(within noise)" in render_compare(a, b, "md")


def test_runs_with_no_shared_cells_say_so() -> None:
    import copy

    a = _demo()
    b = copy.deepcopy(a)
    for r in b["results"]:
        r["prompt"] = "other-" + r["prompt"]
    md = render_compare(a, b, "md")
    assert "**Conclusion:** No cells in common, so nothing to compare cell by cell" in md
    assert "No shared cells (8 only in A; 8 only in B, not counted)" in md
    assert "cells changed" not in md


def test_a_setting_left_out_or_null_is_its_default_and_no_difference() -> None:
    a = _data([100.0], [150.0])
    b = _data([100.0], [150.0])
    a["profile"]["run"].update(reference=False, warm_rounds=False, threads=0)
    b["profile"]["run"].update(reference=None)  # saved as null: the default, False
    assert profile_differences(a, b) == []
    b["profile"]["arms"][1]["options"] = None  # no options saved: none set
    assert profile_differences(a, b) == []
    b["profile"]["run"]["warm_rounds"] = True
    assert profile_differences(a, b) == ["run settings differ: warm_rounds False → True"]
    # an order left out is the order such a run had: arm by arm
    c = _data([100.0], [150.0])
    c["profile"]["run"]["order"] = "paired"
    assert profile_differences(a, c) == ["run settings differ: order 'arms' → 'paired'"]


def test_a_kernel_build_is_a_condition_and_another_os_another_machine() -> None:
    a = _demo()
    b = _demo()
    b["machine"]["platform"] = a["machine"]["platform"].replace("fc-v1300", "fc-v1045")
    said = warnings(a, b)
    assert not any("different machines" in w for w in said), said
    assert any(w.startswith("the runs ran under other conditions: OS build Linux-6.18.44-fc-v1300") for w in said)
    b["machine"]["platform"] = "macOS-15.1-arm64-arm-64bit"
    assert any("different machines: OS Linux in A, macOS in B" in w for w in warnings(a, b))
