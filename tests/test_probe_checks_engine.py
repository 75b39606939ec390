"""The probe's checks on real passes: the embedded SmolLM2 on llama.cpp in
process (a width stalled in the first measurement is measured again to a
good curve), and llama-server (a wide width that does not fit leaves the
narrower ones measured)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Sequence

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
    assert first[10] > 10 and again[10] < 10 and p.t_ratio(10) == pytest.approx(again[10])
    assert p.trusted, p.trust.reason
    assert "after measuring width" in p.trust_words()


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
