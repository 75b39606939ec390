"""The probe's checks on real passes: the embedded SmolLM2 on llama.cpp in
process (a width stalled in the first measurement is measured again to a
good curve; a run's own verify cost set against its probe, width by width,
and named when a prediction misses), and llama-server (a wide width that
does not fit in memory leaves the narrower ones measured)."""

from __future__ import annotations

import json
import re
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import pytest

from lab.base import probe as probes
from lab.base import probe_rules
from lab.probing import driver
from tests.test_probe import engine_problem


@pytest.fixture(scope="module")
def engine_ok() -> None:
    why = engine_problem()
    if why:
        pytest.skip(why)


@pytest.mark.engine
@pytest.mark.slow
@pytest.mark.alone  # a ratio of timings: other tests beside it move the curve
def test_a_width_stalled_in_the_first_measurement_is_measured_again_to_a_good_curve(
        engine_ok: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from lab_llamacpp import probe as llama_probe

    real: Callable[..., Callable[[int], float]] = llama_probe._timed_passes
    stalled: list[int] = []

    def stalling(ctx: Any, widths: Sequence[int], depth: int) -> Callable[[int], float]:
        one_pass = real(ctx, widths, depth)
        # every width asked for: the first measurement (the second asks only for what broke a rule)
        first = len(widths) == 3

        def timed(w: int) -> float:
            t0 = time.perf_counter()
            one_pass(w)
            if w == 10 and first:
                # another process held the core: each pass of ten rows took four times as long
                stalled.append(w)
                time.sleep(3 * (time.perf_counter() - t0))
            return time.perf_counter() - t0

        return timed

    monkeypatch.setattr(llama_probe, "_timed_passes", stalling)
    said: list[str] = []
    p = driver.measure("llamacpp", "embedded:smollm2", (1, 4, 10), threads=2, bandwidth=False, progress=said.append)
    assert stalled and any("measuring width" in s and "again" in s for s in said), said
    assert 10 in p.trust.remeasured
    first = {w: mid for _d, w, _lo, mid, _hi in p.notes[probe_rules.CHECKS]["remeasured"]["first"]}
    again = {w: mid for _d, w, _lo, mid, _hi in p.notes[probe_rules.CHECKS]["remeasured"]["again"]}
    # the stall priced ten rows far above ten one-row passes; measured again, below
    assert first[10] > 10 and again[10] < 10 and p.t_ratio(10) == pytest.approx(again[10], rel=1e-3)
    assert p.trusted, p.trust.reason
    assert "after measuring width" in p.trust_words()


# -- a run's own verify cost against its probe -----------------------------------------------------

RUN = """
[profile]
name = "probe-against-run"

[run]
max_tokens = 96
rounds = 2
warmup = 0
threads = 1
n_ctx = 512
chat_template = false
ignore_eos = true

[[prompts]]
name = "prose"
text = "The lighthouse keeper climbed the stairs at dusk and"

[[arms]]
name = "baseline"
backend = "llamacpp"
model = "embedded:smollm2"

[[arms]]
name = "oracle"
backend = "llamacpp"
model = "embedded:smollm2"
drafter = "oracle"
n_max = 4
"""


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One real run of the embedded model: the baseline and an oracle at n_max 4 (every step verifies
    five rows), its own probe measured with it."""
    if engine_problem():
        pytest.skip(engine_problem() or "")
    from lab.profile.load import parse_profile
    from lab.registry import load_registry
    from lab.runner import Runner
    from lab.store import RunStore

    tmp = tmp_path_factory.mktemp("probe-run")
    with pytest.MonkeyPatch.context() as patch:
        # its own cache: the probe is measured by the code under test, never found from an earlier run
        patch.setenv("LAB_CACHE_DIR", str(tmp / "cache"))
        registry = load_registry()
        profile = parse_profile(RUN, str(tmp / "run.toml"), registry)
        store = RunStore(profile, tmp / "runs")
        rows = Runner(profile, registry, store).run()
    assert {r.status.value for r in rows} == {"ok"}, [r.detail for r in rows]
    yield store.path


def _steps(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.engine
@pytest.mark.slow
def test_the_probe_is_set_against_the_runs_own_verify_cost(real_run: Path) -> None:
    from lab.analysis import verify_gap
    from lab.render.report import load_for_report, render_markdown

    data = load_for_report(real_run)
    probe = data["probe"]
    results, steps = data["results"], _steps(real_run)
    gaps = verify_gap.for_row(results, steps, "oracle", "prose", probe)
    five = verify_gap.own_width(gaps, 4)
    assert five is not None and five.width == 5
    # the row's own T(5), by hand: the median verify of its five-row steps over the baseline token it was priced in
    verifies = [s["verify_s"] for s in steps if s["arm"] == "oracle" and s["drafted"] == 4]
    rows = [r for r in results if r["arm"] == "oracle"]
    token = statistics.median(r["step_s"] / r["step_cost_tokens"] for r in rows)
    assert five.steps == len(verifies) >= verify_gap.MIN_STEPS
    assert five.run.mid == pytest.approx(statistics.median(verifies) / token)
    depth = (rows[0]["prompt_tokens"] + rows[0]["n_tokens"] / 2 + rows[1]["prompt_tokens"] + rows[1]["n_tokens"] / 2) / 2
    assert five.probe == pytest.approx(probe.t_ratio_at(5, depth))
    # the noise is the three intervals' (the steps', the probe's repeats', the baseline rounds'), never under their floors
    assert five.noise >= probe_rules.NOISE_FLOOR + probe_rules.FEW_REPEATS_FLOOR
    if probe.trusted:
        md = render_markdown(data)
        line = next(ln for ln in md.splitlines() if ln.startswith("- The probe against this run's own verifies"))
        assert f"oracle / prose 5: {five.run.mid:.2f} → {five.probe:.2f} ({five.gap * 100:+.0f}%" in line
    else:  # a busy machine: the report says why there is no prediction instead
        assert "no trustworthy probe" in render_markdown(data)


@pytest.mark.engine
@pytest.mark.slow
def test_a_probe_far_from_the_runs_verifies_is_named_when_its_prediction_misses(real_run: Path, tmp_path: Path) -> None:
    from lab.analysis.run import GAP_TAG
    from lab.render.report import load_for_report, render_markdown

    # a probe that keeps every rule (rising, at most w) but prices a verify of five rows at 1.1 one-row passes, as a
    # GPU might, where this CPU's own five-row steps cost several: T(w) on the line from T(1) = 1 to T(5) = 1.1
    steps = _steps(real_run)
    rows = [r for r in load_for_report(real_run)["results"] if r["arm"] == "oracle"]
    token = statistics.median(r["step_s"] / r["step_cost_tokens"] for r in rows)
    run_t5 = statistics.median(s["verify_s"] for s in steps if s["arm"] == "oracle" and s["drafted"] == 4) / token
    t5 = 1.1
    assert run_t5 > 2.5, run_t5  # a CPU: a verify of five rows costs several one-row passes
    ts = {w: 1 + (w - 1) * (t5 - 1) / 4 for w in range(1, 9)}
    cheap = tuple(tuple(token * ts[w] * (1 + 0.003 * r) for w in ts) for r in range(3))
    doctored = probes.Probe("llamacpp", "embedded:smollm2", "decode", tuple(ts), cheap, notes={probe_rules.CHECKS: {}},
                            origin={"arms": ["oracle"]})
    assert doctored.trusted, doctored.trust.reason
    path = probes.save(doctored, tmp_path / "cheap.json")
    data = load_for_report(real_run, probe=path)
    from lab.analysis.run import predicted_for_rows

    pred = next(p for p in predicted_for_rows(data["results"], steps, data["probe"]) if p["arm"] == "oracle")
    gap = next(g for g in pred["verify_gaps"] if g["width"] == 5)
    assert gap["gap"] == pytest.approx(t5 / run_t5 - 1, abs=0.01) and gap["beyond_noise"], gap
    tags = {tag: why for tag, why in pred["caveats"]}
    assert GAP_TAG in tags and "the probe is the likely cause" in tags[GAP_TAG]
    # priced at the run's own verify cost, the prediction comes back to the measured speedup
    assert abs(pred["predicted_with_run_verify"] / pred["measured"] - 1) < abs(pred["predicted"] / pred["measured"] - 1)
    md = render_markdown(data)
    section = md.split("## Prediction", 1)[1].split("\n## ", 1)[0]
    row = next(ln for ln in section.splitlines() if ln.startswith("| oracle | prose |"))
    assert re.search(rf"⚠ [a-z ,]*{GAP_TAG}", row), row
    assert "(probe gap): the probe priced a verify of 5 rows" in md and "the probe is the likely cause" in md


# -- llama-server: a wide width that does not fit -------------------------------------------------------


@pytest.mark.engine
@pytest.mark.slow
def test_a_wide_width_that_does_not_fit_keeps_the_narrower_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lab_llamacpp_server.binary import ServerNotFound, server_info

    try:
        server_info()
    except ServerNotFound as exc:
        pytest.skip(f"llama-server not found: {exc}")
    from lab.analysis import predict
    from lab.analysis.measured_acceptance import PositionAcceptance

    monkeypatch.setenv("LAB_CACHE_DIR", str(tmp_path / "cache"))
    said: list[str] = []
    # a batch of 8 holds a step of the sampled token and 7 drafts; the server at n_max 15 aborts on its first
    # step ("batch must be large enough to hold the sampled and draft tokens")
    p = driver.measure("llamacpp-server", "tiny:llama", (1, 2, 4, 8, 16, 32), threads=1, bandwidth=False,
                       options={"spec_type": "draft-simple", "draft_model": "tiny:llama",
                                "extra_args": ["-b", "8", "-ub", "8"]},
                       repeats=1, progress=said.append)
    assert p.widths == (1, 2, 4, 8)
    assert sorted(p.widths_failed) == [16, 32]
    assert "batch must be large enough" in p.widths_failed[16]
    assert p.widths_failed[32] == f"{probes.NOT_TRIED}: wider than width 16"
    assert p.failed_words().startswith("widths 16,32 did not run (") and "did not run" in p.origin_line()
    assert any("did not run; the curve keeps 1-2,4,8" in s for s in said), said
    # what ran prices what it covers
    acceptance = PositionAcceptance(reached=(10, 8, 6, 4, 2, 1, 1), accepted=(8, 6, 4, 2, 1, 1, 1))
    inputs = predict.ArmInputs(baseline_token_s=p.pass_seconds(1), draft_s_per_token=0.0, plain_share=0.1, n_max=7)
    assert [x.n_max for x in predict.predict(acceptance, p, inputs)] == list(range(1, 8))
