"""Passes that switch width: a GPU backend that replays a captured graph
(llama.cpp on CUDA) rebuilds it when a pass has another shape than the one
before, so a drafter that drafts only some steps pays for every plain
decode between its steps. The loop counts those passes, the probe times
them on a GPU, and the prediction prices them (lab.analysis.predict); on
a CPU nothing is timed and nothing changes."""

from __future__ import annotations

from typing import Any, Sequence, cast

import pytest

from lab.analysis.measured_acceptance import PositionAcceptance
from lab.analysis.predict import ArmInputs, arm_inputs, predict
from lab.api import Draft, Drafter, DrafterContext, GenerationRequest
from lab.base.events import Cell
from lab.base.probe import Probe
from lab.kit.speculative import LoopStats, generate
from tests.test_overlap import VOCAB, Scripted, truth
from tests.test_policy import PROFILE as POLICY_PROFILE


class SomeSteps(Drafter):
    """Drafts the true continuation on a fixed pattern of iterations (1, 2
    or 3 tokens, or nothing), so steps of several widths and plain decodes
    alternate."""

    name = "some-steps"
    PATTERN = (0, 3, 3, 0, 0, 2, 1, 0, 3)

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.calls = 0

    def draft(self, context: Sequence[int], k: int) -> Draft:
        n = min(k, self.PATTERN[self.calls % len(self.PATTERN)])
        self.calls += 1
        ctx, out = list(context), []
        for _ in range(n):
            out.append(truth(ctx) if len(ctx) % 5 else (truth(ctx) + 1) % VOCAB)
            ctx.append(out[-1])
        return Draft(tuple(out))


def _widths(log: Sequence[str]) -> list[int]:
    """Rows of every decode after the prompt's, from the target's own log."""
    decodes = [line for line in log if line.startswith("decode ")]
    return [len(eval(line[len("decode "):])) for line in decodes[1:]]  # the test's own log


def test_the_loop_counts_the_passes_that_switch_width() -> None:
    log: list[str] = []
    target = Scripted(log)
    req = GenerationRequest(cell=Cell("arm", "p", 1), prompt="", system=None, chat_template=False,
                            max_tokens=40, temperature=0.0, seed=0, ignore_eos=True, n_max=3)
    stats = LoopStats()
    drafter = SomeSteps({}, cast(DrafterContext, None))
    gen = generate(target, [3, 14, 15], req, lambda _e: None, lambda: False, drafter=drafter, stats=stats)
    widths = _widths(log)
    pairs = list(zip(widths, widths[1:]))
    # counted from the decodes themselves: a step after a pass of another width, a plain pass after a step
    into_steps = sum(1 for a, b in pairs if b > 1 and a != b)
    into_plain = sum(1 for a, b in pairs if b == 1 and a > 1)
    assert into_steps > 0 and into_plain > 0 and any(a == b > 1 for a, b in pairs)
    assert (stats.switch_steps, stats.switch_plain) == (into_steps, into_plain)
    report = gen.engine_report
    assert (report["switch_steps"], report["switch_plain"]) == (into_steps, into_plain)
    assert stats.steps + stats.plain_tokens == len(widths)
    # the pass right after a switch that keeps its width (where a CUDA backend captures the new graph);
    # the cell's first passes follow the prompt, which is no counted switch
    second_steps = second_plain = 0
    for i in range(1, len(widths) - 1):
        if widths[i] != widths[i - 1] and (i > 1 or widths[0] != widths[1]) and widths[i + 1] == widths[i]:
            second_steps += widths[i] > 1
            second_plain += widths[i] == 1
    assert second_steps > 0 and second_plain > 0
    assert (stats.second_steps, stats.second_plain) == (second_steps, second_plain)
    assert (report["second_steps"], report["second_plain"]) == (second_steps, second_plain)


def _probe(switch: dict[str, Any] | None) -> Probe:
    notes = {"switch_s": switch} if switch is not None else {}
    return Probe("llamacpp", "m", "decode", (1, 2, 3, 5), ((0.001, 0.0012, 0.0013, 0.0015),), notes=notes)


SWITCH = {"one_s": 0.0011, "widths": {"2": [0.0012, 0.0032, 0.0031], "5": [0.0015, 0.0045, 0.0011]}}


def test_a_probe_prices_a_switching_pass_over_its_back_to_back_figure() -> None:
    p = _probe(SWITCH)
    # in baseline tokens (the probe's one-row pass, 1 ms): w rows after one, one row after w
    assert p.switch_ratio(2) == pytest.approx((2.0, 2.0))
    # one row after five rows cost no more than back to back: 0, never below
    assert p.switch_ratio(5) == pytest.approx((3.0, 0.0))
    # between measured widths, the line; past them, nothing
    assert p.switch_ratio(3) == pytest.approx((2 + 1 / 3, 2 - 2 / 3))
    assert p.switch_ratio(6) is None and p.switch_ratio(1) is None
    assert _probe(None).switch_ratio(2) is None
    assert _probe({"one_s": "x", "widths": {}}).switch_ratio(2) is None


SECOND = {"one_s": 0.0011, "widths": {"2": [0.0012, 0.0032, 0.0031, 0.0022, 0.0019],
                                      "5": [0.0015, 0.0045, 0.0011, 0.0020, 0.0021]}}


def test_a_probe_prices_the_pass_after_a_switch_where_it_timed_it() -> None:
    p = _probe(SECOND)
    assert p.switch_ratio(2) == pytest.approx((2.0, 2.0))  # five entries read as three for the switch
    # the second pass of w rows over w back to back, of one row over one row back to back
    assert p.second_ratio(2) == pytest.approx((1.0, 0.8))
    assert p.second_ratio(5) == pytest.approx((0.5, 1.0))
    assert _probe(SWITCH).second_ratio(2) is None  # a probe from before it timed them
    # priced at the row's shares beside the switches themselves
    full = PositionAcceptance((100, 100, 100, 100), (90, 80, 70, 60))
    both = ArmInputs(baseline_token_s=0.001, draft_s_per_token=0.0, plain_share=0.4, n_max=4,
                     switch_in_share=0.3, switch_out_share=0.2, second_in_share=0.1, second_out_share=0.15)
    got = predict(full, p, both, [4])[0]
    assert got.switch_cost == pytest.approx((0.3 * 3.0 + 0.2 * 0.0 + 0.1 * 0.5 + 0.15 * 1.0) / 0.6)
    # the old probe prices the switches alone
    assert predict(full, _probe(SWITCH), both, [4])[0].switch_cost == pytest.approx(0.9 / 0.6)


def test_the_prediction_spreads_the_switches_over_the_steps() -> None:
    full = PositionAcceptance((100, 100, 100, 100), (90, 80, 70, 60))
    base = ArmInputs(baseline_token_s=0.001, draft_s_per_token=0.0, plain_share=0.4, n_max=4)
    switching = ArmInputs(baseline_token_s=0.001, draft_s_per_token=0.0, plain_share=0.4, n_max=4,
                          switch_in_share=0.3, switch_out_share=0.2)
    p = _probe(SWITCH)
    plain = predict(full, p, base, [4])[0]
    priced = predict(full, p, switching, [4])[0]
    assert plain.switch_cost == 0.0
    # (0.3 x 3.0 + 0.2 x 0.0) / (1 - 0.4) baseline tokens a step, at w = 5
    assert priced.switch_cost == pytest.approx(0.9 / 0.6)
    q, landed = 0.4, priced.landed
    assert priced.speedup == pytest.approx((q + (1 - q) * landed) / (q + (1 - q) * (priced.verify_cost + 1.5)))
    assert priced.speedup < plain.speedup and priced.cost == pytest.approx(plain.cost + 1.5)
    # a probe that timed no switching passes (a CPU) prices them at 0
    assert predict(full, _probe(None), switching, [4])[0].speedup == pytest.approx(plain.speedup)


def test_a_rows_switch_shares_are_shares_of_its_passes() -> None:
    rows = [{"status": "ok", "steps": 30, "plain_tokens": 21, "step_cost_tokens": 2.0, "step_s": 0.004, "drafted": 90,
             "draft_s": 0.0, "n_max": 3,
             "engine_report": {"switch_steps": 12, "switch_plain": 10, "loop_steps": 30, "loop_overhead_s": 0.0}},
            {"status": "ok", "steps": 20, "plain_tokens": 1, "step_cost_tokens": 2.0, "step_s": 0.004, "drafted": 60,
             "draft_s": 0.0, "n_max": 3, "engine_report": {"loop_steps": 20, "loop_overhead_s": 0.0}}]
    got = arm_inputs(rows)
    assert got is not None
    # the second row's loop counted none (a run from before): only the first row's passes are shared out
    assert got.switch_in_share == pytest.approx(12 / 50) and got.switch_out_share == pytest.approx(10 / 50)
    assert got.second_in_share == got.second_out_share == 0.0  # rows from before the loop counted them
    rows[0]["engine_report"] |= {"second_steps": 5, "second_plain": 4}
    got = arm_inputs(rows)
    assert got is not None and got.second_in_share == pytest.approx(5 / 50) and got.second_out_share == pytest.approx(4 / 50)


@pytest.mark.engine
def test_switching_passes_are_timed_on_real_llama_cpp() -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[llamacpp]')")
    from lab_llamacpp import probe

    from lab.api import BackendContext
    from lab.base.profile import Arm, RunSettings
    from lab.registry import load_registry

    cls = load_registry().backend("llamacpp")
    arm = Arm(name="p", backend="llamacpp", model="tiny:llama", drafter=None, n_max=None, options={},
              drafter_options={}, baseline=None, is_baseline=True, stack=cls.stack, group="p")
    b = cls(arm, BackendContext(RunSettings(threads=1, n_ctx=512), "", lambda _t: None))
    b.load(lambda _e: None)
    try:
        got = probe.switch_pass_seconds(b.context, (1, 2, 4), inner=3, depth=16)
        assert set(got["widths"]) == {"2", "4"} and got["one_s"] > 0
        assert all(len(v) == 5 and min(v) > 0 for v in got["widths"].values())
        # a cell's passes: each width's in order after another shape, keeping their rows
        cells = probe.cell_pass_seconds(b.context, (1, 3, 130), passes=5, depth=16)
        # 130 rows four times cannot fit the 496 cells after the prefix: that width is left out, not shortened below four passes
        assert set(cells) == {"1", "3"} and all(len(v) == 5 and min(v) > 0 for v in cells.values())
        assert b.context.n_past == 0
        # on the CPU a probe measures no switching passes: nothing is captured there to rebuild
        b.measure_verify_cost((1, 2))
        assert "switch_s" not in b.probe_notes() and "cell_s" not in b.probe_notes()
    finally:
        b.close()




def run_ngram_with_recorded_probe(tmp_path: Any, notes: dict[str, Any], max_tokens: int = 48) -> tuple[Any, Any, Any]:
    """The policy tests' SmolLM2 n-gram profile run for real, its
    predictions priced by a recorded GPU probe (T(1) 1 ms) with ``notes``:
    (the probe, the n-gram row at n_max 4, the saved run as the report reads it)."""
    from lab.base import probe as probes
    from lab.profile.load import parse_profile
    from lab.registry import load_registry
    from lab.render.report import load_for_report
    from lab.runner import Runner
    from lab.store import RunStore

    recorded = probes.Probe("llamacpp", "embedded:smollm2", "decode", tuple(range(1, 7)),
                            ((0.001, 0.0012, 0.0013, 0.0014, 0.0015, 0.0016),), notes={"n_gpu_layers": 999, **notes})
    probes.save(recorded, tmp_path / "gpu-probe.json")
    registry = load_registry()
    text = POLICY_PROFILE.format(policy="").replace("max_tokens = 48", f"max_tokens = {max_tokens}")
    text = text.replace("warmup = 0", 'warmup = 0\nprobe = "gpu-probe.json"')
    assert "threads = 1" in text  # one engine thread, as the policy tests run it
    profile = parse_profile(text, str(tmp_path / "p.toml"), registry)
    store = RunStore(profile, tmp_path / "runs")
    rows = Runner(profile, registry, store).run()
    assert {r.status.value for r in rows} == {"ok"}, [r.detail for r in rows]
    return recorded, next(r for r in rows if r.arm == "ngram"), load_for_report(store.path)


@pytest.mark.engine
def test_a_real_runs_switches_priced_by_a_recorded_gpu_probe_reach_the_report(tmp_path: Any) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[llamacpp]')")
    import json

    from lab.render.report import render_json, render_markdown

    # a GPU probe as one was recorded: a one-row pass of 1 ms, passes that switch width dearer
    switching = {"one_s": 0.00105, "widths": {str(w): [0.001 + 0.0001 * w, 0.0035 + 0.0001 * w, 0.0032]
                                              for w in range(2, 7)}}
    # longer cells than the policy tests'
    recorded, ngram, data = run_ngram_with_recorded_probe(tmp_path, {"switch_s": switching}, max_tokens=64)
    report = ngram.engine_report
    # the n-gram drafter drafts on some steps only: plain decodes sit between its steps
    assert report["switch_steps"] > 0 and report["switch_plain"] > 0
    pred = next(p for p in json.loads(render_json(data))["analysis"]["predictions"] if p["arm"] == "ngram")
    own = next(c for c in pred["curve"] if c["n_max"] == 4)
    passes = ngram.steps + ngram.plain_tokens - 1  # the first token comes with the prompt
    q = (ngram.plain_tokens - 1) / passes
    s_in, s_out = recorded.switch_ratio(5)
    expected = (report["switch_steps"] / passes * s_in + report["switch_plain"] / passes * s_out) / (1 - q)
    assert own["switch_cost"] == pytest.approx(expected) and expected > 0.1
    text = render_markdown(data)
    assert "- ngram / code: its passes switch width" in text and f"{own['switch_cost']:.2f} of a step's" in text
    # every saved step of the loop says what its pass followed, and the report sets each kind beside the probe's
    assert {s.get("pass_kind") for s in data["steps"] if s["arm"] == "ngram"} <= {"first", "switch", "second", "steady"}
    assert all("pass_kind" in s for s in data["steps"])
    kinds = next(k for k in json.loads(render_json(data))["analysis"]["pass_kinds"] if k["prompt"] == "code")
    assert kinds["arm"] == "ngram" and kinds["probe_timed"]
    # the recorded probe timed switches only: the passes after them are not timed
    assert "- ngram / code: passes by kind, this run against the probe" in text and "(not timed)" in text


def _acceptance(costs: dict[str, Any]) -> dict[str, Any]:
    from lab.analysis import acceptance_file as ap

    entry = {"scope": "prompt", "arm": "ngram", "prompt": "code", "backend": "llamacpp", "target": "m",
             "drafter": "ngram", "n_max": 4, "reached": [100, 60, 40, 20], "accepted": [60, 40, 20, 10],
             "costs": costs}
    return {"kind": ap.KIND, "version": 1, "entries": [entry]}


def test_an_acceptance_file_carries_the_switch_shares_to_another_machines_probe() -> None:
    from lab.analysis import acceptance_file as ap

    costs = {"baseline_token_s": 0.02, "draft_s_per_token": 0.0, "loop_s_per_step": 0.0, "plain_share": 0.4,
             "switch_in_share": 0.3, "switch_out_share": 0.2}
    entry = ap.from_json(_acceptance(costs)).entries[0]
    assert (entry.costs.switch_in_share, entry.costs.switch_out_share) == (0.3, 0.2)
    gpu = _probe(SWITCH)
    got = ap.predict_on(entry, gpu)
    own = next(p for p in got.predictions if p.n_max == 4)
    # the shares are the file's run's, the price the probe's machine's: (0.3 x 3.0 + 0.2 x 0) / 0.6 at w = 5
    assert own.switch_cost == pytest.approx(1.5)
    words = ap.switch_words(entry, gpu)
    assert "30% of passes a step after another width" in words and "3.00 / 0.00 baseline tokens" in words
    # a probe of a CPU timed no switching passes: priced at 0, and said so
    assert next(p for p in ap.predict_on(entry, _probe(None)).predictions if p.n_max == 4).switch_cost == 0.0
    assert "priced at 0" in ap.switch_words(entry, _probe(None))
    # a file from before the loop counted them reads 0
    older = {k: v for k, v in costs.items() if not k.startswith("switch")}
    assert ap.from_json(_acceptance(older)).entries[0].costs.switch_in_share == 0.0
    with pytest.raises(ap.AcceptanceFileError, match="switch shares are shares of passes"):
        ap.from_json(_acceptance({**costs, "switch_out_share": 1.5}))
    with pytest.raises(ap.AcceptanceFileError, match="costs.switch_in_share must be a number"):
        ap.from_json(_acceptance({**costs, "switch_in_share": "many"}))
    # the passes right after a switch travel too, and a probe that timed them prices them
    seconds = {**costs, "second_in_share": 0.1, "second_out_share": 0.15}
    entry = ap.from_json(_acceptance(seconds)).entries[0]
    assert (entry.costs.second_in_share, entry.costs.second_out_share) == (0.1, 0.15)
    priced = next(p for p in ap.predict_on(entry, _probe(SECOND)).predictions if p.n_max == 4)
    assert priced.switch_cost == pytest.approx((0.9 + 0.1 * 0.5 + 0.15 * 1.0) / 0.6)
    words = ap.switch_words(entry, _probe(SECOND))
    assert "10% / 15% the step / plain decode right after such a switch" in words and "0.50 / 1.00 for the pass after it" in words
    assert "the pass after it at 0" in ap.switch_words(entry, gpu)
    with pytest.raises(ap.AcceptanceFileError, match="switch shares are shares of passes"):
        ap.from_json(_acceptance({**seconds, "second_out_share": 1.5}))


@pytest.mark.parametrize("damaged", ["many", -5, 2.5, None, True])
def test_a_damaged_switch_count_in_a_saved_row_counts_as_none(damaged: Any) -> None:
    row = {"status": "ok", "steps": 30, "plain_tokens": 21, "step_cost_tokens": 2.0, "step_s": 0.004, "drafted": 90,
           "draft_s": 0.0, "n_max": 3, "engine_report": {"switch_steps": damaged, "switch_plain": 10}}
    got = arm_inputs([row])
    assert got is not None and (got.switch_in_share, got.switch_out_share) == (0.0, 0.0)


def test_a_draft_probe_prices_a_drafted_token_as_the_drafter_picks_it() -> None:
    from lab.analysis import acceptance_file as ap

    costs = {"baseline_token_s": 0.02, "draft_s_per_token": 0.004, "loop_s_per_step": 0.0, "plain_share": 0.0}
    entry = ap.from_json(_acceptance(costs)).entries[0]
    entry = ap.Entry(**{**entry.__dict__, "drafter": "draft-model", "drafter_model": "d"})
    host = Probe("llamacpp", "d", "decode", (1, 2), ((0.0010, 0.0012),))
    device = Probe("llamacpp", "d", "decode", (1, 2), ((0.0010, 0.0012),),
                   notes={"gpu_pick": True, "switch_s": {"one_s": 0.0013, "widths": {}}})
    target = _probe(SWITCH)
    # the probe's one-row pass picks on the host (a baseline's); the drafter picks on the device
    inputs, said, _ = ap.inputs_for(entry, target, device)
    assert inputs.draft_s_per_token == pytest.approx(0.0013) and "with device picks" in said
    inputs, said, _ = ap.inputs_for(entry, target, host)
    assert inputs.draft_s_per_token == pytest.approx(0.0010) and "device picks" not in said
    # host picks (gpu_pick false), or a damaged figure: T(1)'s pass
    for notes in ({"gpu_pick": False, "switch_s": {"one_s": 0.0013}}, {"gpu_pick": True, "switch_s": {"one_s": "fast"}}):
        assert Probe("llamacpp", "d", "decode", (1, 2), ((0.001, 0.0012),), notes=notes).drafted_token_s == pytest.approx(0.001)


@pytest.mark.engine
def test_an_offloaded_probe_with_device_picks_times_the_switches_and_the_drafters_token() -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[llamacpp]')")
    from lab.api import BackendContext
    from lab.base.profile import Arm, RunSettings
    from lab.registry import load_registry

    cls = load_registry().backend("llamacpp")
    # the CPU backend runs the same sampler graph (gpu_pick "on") and takes n_gpu_layers as asked
    arm = Arm(name="p", backend="llamacpp", model="tiny:llama", drafter=None, n_max=None,
              options={"n_gpu_layers": 999, "gpu_pick": "on"}, drafter_options={}, baseline=None, is_baseline=True,
              stack=cls.stack, group="p")
    b = cls(arm, BackendContext(RunSettings(threads=1, n_ctx=512), "", lambda _t: None))
    b.load(lambda _e: None)
    try:
        b.measure_verify_cost((1, 2, 3))
        notes = b.probe_notes()
    finally:
        b.close()
    assert set(notes["switch_s"]["widths"]) == {"2", "3"} and notes["gpu_pick"] is True
    # and each width's passes as a cell decodes them, the first ones after another shape included
    from lab_llamacpp.probe import CELL_PASSES

    cells = notes["cell_s"]
    assert cells["passes"] == CELL_PASSES and set(cells["widths"]) == {"1", "2", "3"}
    assert all(len(v) == CELL_PASSES and min(v) > 0 for v in cells["widths"].values())
    probe = Probe("llamacpp", "tiny:llama", "decode", (1, 2, 3), ((0.001, 0.002, 0.003),), notes=notes)
    # a drafted token is priced at the device-picked one-row pass the probe timed
    assert probe.drafted_token_s == notes["switch_s"]["one_s"] > 0
