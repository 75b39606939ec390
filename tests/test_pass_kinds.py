"""Passes by kind: the loop tells what each target pass followed (the cell's
prompt, a pass of another width, the pass right after such a switch, or
one more of the same width), saves it with each step and keeps plain
decodes' seconds by kind; the report sets what each kind took beside what
the probe timed for it, so a prediction that misses shows which kind ran
dearer (lab.analysis.pass_kinds)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence, cast

import pytest

from lab.analysis.pass_kinds import pass_kinds
from lab.api import DrafterContext, GenerationRequest
from lab.base import probe as probes
from lab.base.events import Cell, Event, StepEvent
from lab.kit import speculative
from lab.kit.speculative import LoopStats, generate
from tests.test_overlap import Scripted
from tests.test_width_switches import SomeSteps, _widths

# What the scripted target's passes take, by what the target itself saw
# before each one (its own bookkeeping, not the loop's): a plain decode and a
# step of every kind, on a clock that moves only while the target decodes.
PLAIN_S = {"first": 0.009, "switch": 0.003, "second": 0.004, "steady": 0.001}
STEP_S = {"first": 0.019, "switch": 0.013, "second": 0.014, "steady": 0.011}


def _kind(widths: Sequence[int], i: int) -> str:
    """Pass i's kind, read from the widths of the passes alone."""
    if i == 0:
        return "first"
    if widths[i] != widths[i - 1]:
        return "switch"
    if i >= 2 and widths[i - 1] != widths[i - 2]:
        return "second"
    return "steady"


class Runs(SomeSteps):
    """SomeSteps' drafts on a pattern of lengths whose runs of steps and of
    plain decodes are long enough to hold every kind of each."""

    name = "runs"
    PATTERN = (0, 3, 3, 3, 3, 0, 0, 0, 0, 2, 2, 0, 1, 0, 0, 3, 3, 3)


class Timed(Scripted):
    """A scripted target whose decodes advance a virtual clock by what a
    pass of that kind costs (the prompt's decode costs nothing)."""

    def __init__(self, log: list[str], clock: list[float]) -> None:
        super().__init__(log)
        self.clock = clock
        self.seen: list[int] = []  # widths of the passes after the prompt

    def decode(self, ids: Sequence[int], all_logits: bool) -> None:
        prompt = not self.kv
        super().decode(ids, all_logits)
        if prompt:
            return
        self.seen.append(len(ids))
        kind = _kind(self.seen, len(self.seen) - 1)
        self.clock[0] += (PLAIN_S if len(ids) == 1 else STEP_S)[kind]


def test_the_loop_tells_each_pass_its_kind_and_times_plain_decodes_by_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [0.0]
    monkeypatch.setattr(speculative, "now", lambda: clock[0])
    log: list[str] = []
    target = Timed(log, clock)
    req = GenerationRequest(cell=Cell("arm", "p", 1), prompt="", system=None, chat_template=False,
                            max_tokens=60, temperature=0.0, seed=0, ignore_eos=True, n_max=3)
    events: list[Event] = []
    stats = LoopStats()
    gen = generate(target, [3, 14, 15], req, events.append, lambda: False,
                   drafter=Runs({}, cast(DrafterContext, None)), stats=stats)
    widths = _widths(log)
    kinds = [_kind(widths, i) for i in range(len(widths))]
    # the pattern gives every kind of step and of plain decode
    assert {k for k, w in zip(kinds, widths) if w > 1} == {"switch", "second", "steady"}
    assert set(k for k, w in zip(kinds, widths) if w == 1) == {"first", "switch", "second", "steady"}
    steps = [e for e in events if isinstance(e, StepEvent)]
    assert [s.pass_kind for s in steps] == [k for k, w in zip(kinds, widths) if w > 1]
    # a step's verify seconds are its pass's (picks and rollback take no virtual time)
    assert [s.verify_s for s in steps] == pytest.approx([STEP_S[k] for k, w in zip(kinds, widths) if w > 1])
    plain = [k for k, w in zip(kinds, widths) if w == 1]
    report = gen.engine_report
    for kind in ("switch", "second", "steady"):
        n = plain.count(kind)
        assert report[f"{kind}_plain_s"] == pytest.approx(n * PLAIN_S[kind])
    assert (report["switch_plain"], report["second_plain"], report["steady_plain"]) == (
        plain.count("switch"), plain.count("second"), plain.count("steady"))
    # the counters agree with the kinds the steps were told
    assert (report["switch_steps"], report["second_steps"]) == (
        [s.pass_kind for s in steps].count("switch"), [s.pass_kind for s in steps].count("second"))


def test_a_step_record_names_its_kind_only_where_the_loop_told_it() -> None:
    cell = Cell("spec", "prose", 1)
    before = {"arm", "prompt", "round", "index", "drafted", "accepted", "landed", "draft_s", "verify_s", "step_s",
              "measured"}
    # a backend that does not tell kinds saves exactly what it always did
    assert set(StepEvent(cell, 0, 4, 2, 3, None, None, 0.01).record()) == before
    told = StepEvent(cell, 0, 4, 2, 3, 0.001, 0.002, 0.003, pass_kind="second").record()
    assert set(told) == before | {"pass_kind"} and told["pass_kind"] == "second"


def test_a_loop_that_counts_plain_tokens_alone_reports_no_seconds_by_kind() -> None:
    stats = LoopStats()
    start = stats.mark()
    stats.plain_tokens += 3  # as the MLX loops count theirs, without kinds
    report = stats.cell_report(start)
    assert "steady_plain" not in report and "switch_plain_s" not in report
    stats.add_plain("switch", 0.25)
    stats.add_plain("steady", 0.5)
    mine = stats.mark()
    stats.add_plain("first", 0.75)
    stats.add_plain("steady", 0.125)
    # a cell's share of totals kept across an arm's cells
    assert stats.cell_report(mine) == {**stats.cell_report(mine), "plain_tokens": 2, "switch_plain": 0,
                                       "switch_plain_s": 0.0, "steady_plain": 1, "steady_plain_s": 0.125}
    assert "steady_plain" not in stats.cell_report(start)  # three plain tokens of that span told no kind


# The probe's switch_s at 5 rows: back to back, after one row, one row after
# it, and the second pass of each (seconds), beside one row back to back.
SWITCH_S = {"one_s": 0.00107, "widths": {"5": [0.00146, 0.00393, 0.00321, 0.00505, 0.00430],
                                         "3": [0.00120, 0.00300, 0.00250, 0.00400, 0.00350]}}


def _probe(switch: Any = SWITCH_S) -> probes.Probe:
    notes = {} if switch is None else {"switch_s": switch}
    return probes.Probe("llamacpp", "m", "decode", (1, 2, 3, 4, 5), ((0.001, 0.0012, 0.0013, 0.0014, 0.0015),),
                        notes=notes)


def _step(kind: Any, verify_s: Any, drafted: int = 4, round_: int = 1, arm: str = "ngram",
          prompt: str = "prose") -> dict[str, Any]:
    step = {"arm": arm, "prompt": prompt, "round": round_, "index": 0, "drafted": drafted, "accepted": 0,
            "landed": 1, "draft_s": 0.0001, "verify_s": verify_s, "step_s": 0.005, "measured": "draft,verify,step"}
    if kind is not None:
        step["pass_kind"] = kind
    return step


def _row(report: dict[str, Any], arm: str = "ngram", prompt: str = "prose", round_: int = 1,
         status: str = "ok") -> dict[str, Any]:
    return {"arm": arm, "prompt": prompt, "round": round_, "status": status, "is_baseline": False,
            "backend": "llamacpp", "model": "m", "engine_report": report}


STEPS = [
    _step("switch", 0.00426), _step("switch", 0.00482), _step("switch", 0.00450, round_=2),
    _step("second", 0.00641), _step("second", 0.00672, round_=2),
    _step("steady", 0.00172), _step("steady", 0.00170), _step("steady", 0.00180), _step("steady", 0.00175),
    _step("first", 0.02),
    # another width than most steps', a kind no loop tells, damaged seconds, no kind: left out
    _step("switch", 0.009, drafted=2), _step("sideways", 0.001), _step("steady", "fast"), _step(None, 0.003),
    # a round with no ok row
    _step("switch", 0.05, round_=3),
]
ROWS = [
    _row({"switch_plain": 3, "switch_plain_s": 0.0099, "second_plain": 1, "second_plain_s": 0.0044,
          "steady_plain": 10, "steady_plain_s": 0.0110}),
    _row({"switch_plain": 1, "switch_plain_s": 0.0033, "second_plain": 1, "second_plain_s": 0.0046,
          "steady_plain": "many", "steady_plain_s": 0.5}, round_=2),
    _row({"switch_plain": 9, "switch_plain_s": 9.0}, round_=3, status="error"),
    {**_row({}, arm="base"), "is_baseline": True},
]


def test_passes_by_kind_beside_the_probes_figures_for_them() -> None:
    got = pass_kinds(ROWS, STEPS, [_probe()])
    assert len(got) == 1
    row = got[0]
    assert (row.arm, row.prompt, row.width, row.probe_timed) == ("ngram", "prose", 5, True)
    steps = {k.kind: (k.passes, k.seconds, k.probe_s) for k in row.steps}
    assert steps["switch"] == (3, pytest.approx(0.00450), 0.00393)
    assert steps["second"] == (2, pytest.approx(0.006565), 0.00505)
    assert steps["steady"] == (4, pytest.approx(0.001735), 0.00146)
    plain = {k.kind: (k.passes, k.seconds, k.probe_s) for k in row.plain}
    assert plain["switch"] == (4, pytest.approx(0.0033), 0.00321)
    assert plain["second"] == (2, pytest.approx(0.0045), 0.00430)
    # the second round's steady count is damaged: the first round's alone
    assert plain["steady"] == (10, pytest.approx(0.0011), 0.00107)
    assert [k.kind for k in row.steps] == [k.kind for k in row.plain] == ["switch", "second", "steady"]
    exported = row.to_json()
    assert exported["steps"][0] == {"kind": "switch", "steps": 3, "median_verify_s": pytest.approx(0.0045),
                                    "probe_s": 0.00393}


def test_kinds_without_passes_are_left_out_and_rows_without_switches_too() -> None:
    steps = [_step("switch", 0.004), _step("steady", 0.0017), _step("steady", 0.0017, prompt="code")]
    rows = [_row({"steady_plain": 5, "steady_plain_s": 0.005}),
            _row({"switch_plain": 0, "switch_plain_s": 0.0, "steady_plain": 5, "steady_plain_s": 0.005},
                 prompt="code")]
    got = pass_kinds(rows, steps, _probe())
    assert [(r.arm, r.prompt) for r in got] == [("ngram", "prose")]
    assert [k.kind for k in got[0].steps] == ["switch", "steady"] and [k.kind for k in got[0].plain] == ["steady"]
    # old records (no kinds, no plain seconds) show nothing
    old = [{k: v for k, v in s.items() if k != "pass_kind"} for s in STEPS]
    assert pass_kinds([_row({"switch_plain": 3, "second_plain": 1})], old, _probe()) == []


@pytest.mark.parametrize("damaged", [None, "garbage", {"one_s": "x", "widths": "y"}, {"widths": {"5": "entry"}},
                                     {"one_s": 0.001, "widths": {"4": [0.001] * 5}}])
def test_a_damaged_or_absent_probe_table_prices_no_kind(damaged: Any) -> None:
    got = pass_kinds(ROWS, STEPS, [_probe(damaged)])
    assert len(got) == 1
    assert all(k.probe_s is None for k in got[0].steps)
    # a probe that timed no switches at the steps' width prices none of the row's kinds, one row included
    assert {k.kind: k.probe_s for k in got[0].plain} == {"switch": None, "second": None, "steady": None}
    assert not got[0].probe_timed
    assert pass_kinds(ROWS, STEPS, None)[0].steps[0].seconds == pytest.approx(0.0045)


def test_a_probe_from_before_the_second_pass_was_timed_prices_the_switches_alone() -> None:
    older = {"one_s": 0.00107, "widths": {"5": [0.00146, 0.00393, 0.00321]}}
    row = pass_kinds(ROWS, STEPS, [_probe(older)])[0]
    assert {k.kind: k.probe_s for k in row.steps} == {"switch": 0.00393, "second": None, "steady": 0.00146}
    assert {k.kind: k.probe_s for k in row.plain} == {"switch": 0.00321, "second": None, "steady": 0.00107}


def _saved_run(tmp_path: Path) -> Path:
    from lab.profile.load import parse_profile
    from lab.runner import Runner
    from lab.store import RunStore
    from tests.fakes import BASE_AND_SPEC, fake_registry, profile_toml

    registry = fake_registry()
    profile = parse_profile(profile_toml(BASE_AND_SPEC, max_tokens=40, prompts=("prose", "code")), "f.toml", registry)
    store = RunStore(profile, tmp_path)
    Runner(profile, registry, store).run()
    return store.path


def test_the_report_sets_each_kind_beside_the_probes_for_a_row_that_switched(tmp_path: Path) -> None:
    from lab.render.report import load_for_report, render

    run = _saved_run(tmp_path / "runs")
    # the fake backend tells no kinds: its saved files edited as a loop that tells them saves them
    steps = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()]
    cycle = [("switch", 0.0040), ("second", 0.0060), ("steady", 0.0015)]
    told = 0
    for s in steps:
        if s["arm"] == "spec" and s["prompt"] == "prose":
            s["pass_kind"], s["verify_s"] = cycle[told % 3]
            told += 1
    (run / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    saved = json.loads((run / "results.json").read_text())
    for r in saved["results"]:
        if r["arm"] == "spec":
            r["engine_report"] |= {"switch_plain": 2, "switch_plain_s": 0.0064, "steady_plain": 4,
                                   "steady_plain_s": 0.0044, "second_plain": 0, "second_plain_s": 0.0}
            if r["prompt"] == "code":  # plain decodes that never switched
                r["engine_report"] |= {"switch_plain": 0, "switch_plain_s": 0.0}
    (run / "results.json").write_text(json.dumps(saved))
    widths = {str(s["drafted"] + 1) for s in steps if s["arm"] == "spec"}
    assert "5" in widths
    switch_s = {"one_s": 0.0010, "widths": {"5": [0.0012, 0.0035, 0.0030, 0.0045, 0.0040]}}
    probe = probes.Probe("fake", "none", "decode", (1, 2, 3, 4, 5), ((0.01, 0.012, 0.012, 0.012, 0.012),),
                         notes={"switch_s": switch_s})
    data = load_for_report(run, probes.save(probe, tmp_path / "p.json"))
    md = render(data, "md")
    line = next(x for x in md.splitlines() if x.startswith("- spec / prose: passes by kind"))
    assert ("this run against the probe (ms, steps of 5 rows): steps after a switch 4.00 (3.50) ×" in line
            and "the step after that 6.00 (4.50) ×" in line and "steady steps 1.50 (1.20) ×" in line)
    assert "; plain decodes after a step 3.20 (3.00) ×2, steady 1.10 (1.00) ×4." in line
    assert "the one after that" not in line  # no plain decode came right after a switch
    assert "- spec / code: passes by kind" not in md
    exported = json.loads(render(data, "json"))["analysis"]["pass_kinds"]
    assert [(k["arm"], k["prompt"], k["width"]) for k in exported] == [("spec", "prose", 5)]
    assert exported[0]["plain"][0] == {"kind": "switch", "decodes": 2, "mean_s": pytest.approx(0.0032),
                                       "probe_s": 0.0030}
    # a probe that timed no switching passes (a CPU's, where a switch costs nothing): no line in the
    # report, this run's figures in the JSON alone
    bare = probes.save(probes.Probe("fake", "none", "decode", (1, 5), ((0.01, 0.012),)), tmp_path / "bare.json")
    data = load_for_report(run, bare)
    assert "passes by kind" not in render(data, "md")
    exported = json.loads(render(data, "json"))["analysis"]["pass_kinds"]
    assert [(k["prompt"], k["probe_timed"]) for k in exported] == [("prose", False)]
    assert exported[0]["steps"][0]["median_verify_s"] == pytest.approx(0.0040) and exported[0]["steps"][0]["probe_s"] is None
