"""A cell's first passes: on a GPU backend that captures graphs, the passes
right after a prompt cost more than the steady ones, in every cell, the
baseline's too. The probe times them (``cell_s``); the prediction is then
made per cell of the row's length."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lab.analysis.measured_acceptance import PositionAcceptance
from lab.analysis.predict import ArmInputs, arm_inputs, predict
from lab.base.probe import Probe

# one row back to back: 2 ms; per width, a cell's passes in order (the first two after a change of shape)
CELLS = {"passes": 6, "widths": {"1": [0.008, 0.005, 0.0021, 0.0021, 0.0022, 0.0021],
                                 "5": [0.009, 0.011, 0.0034, 0.0033, 0.0034, 0.0034],
                                 "9": [0.010, 0.012, 0.0050, 0.0051, 0.0050, 0.0050]}}


def _probe(cells: Any = CELLS) -> Probe:
    widths = tuple(range(1, 10))
    seconds = tuple(0.002 + 0.0003 * (w - 1) for w in widths)
    notes = {"n_gpu_layers": 999} if cells is None else {"n_gpu_layers": 999, "cell_s": cells}
    return Probe("llamacpp", "m", "decode", widths, (seconds,), notes=notes)


def test_a_cells_first_passes_are_priced_beyond_its_steady_ones_in_baseline_tokens() -> None:
    p = _probe()
    # width 5: 9 + 11 ms against two steady passes of 3.4 ms, over the 2 ms unit
    assert p.cell_start_ratio(5) == pytest.approx((0.009 + 0.011 - 2 * 0.0034) / 0.002)
    assert p.cell_start_ratio(1) == pytest.approx((0.008 + 0.005 - 2 * 0.0021) / 0.002)
    # between measured widths, linear; past them, nothing
    assert p.cell_start_ratio(7) == pytest.approx((p.cell_start_ratio(5) + p.cell_start_ratio(9)) / 2)
    assert p.cell_start_ratio(12) is None


@pytest.mark.parametrize("cells", [None, {"widths": "fast"}, {"widths": {"5": [0.001, "x", 0.002, 0.002]}},
                                   {"widths": {"5": [0.001, 0.002, 0.002]}}, {"widths": {"5": [0.004, -1, 1, 1]}}])
def test_a_probe_without_good_cell_timings_prices_no_cell_start(cells: Any) -> None:
    p = _probe(cells)
    assert p.cell_start_ratio(5) is None


def test_a_prediction_is_made_per_cell_where_the_probe_timed_cells_and_the_row_says_its_length() -> None:
    p = _probe()
    acc = PositionAcceptance(reached=(100, 90, 80, 70), accepted=(90, 80, 70, 60))
    inputs = ArmInputs(baseline_token_s=0.002, draft_s_per_token=0.0, plain_share=0.0, n_max=4, cell_tokens=255)
    got = predict(acc, p, inputs, [4])[0]
    flat = predict(acc, p, ArmInputs(baseline_token_s=0.002, draft_s_per_token=0.0, plain_share=0.0, n_max=4),
                   [4])[0]
    s_arm, s_base = p.cell_start_ratio(5), p.cell_start_ratio(1)
    assert s_arm is not None and s_base is not None
    # by hand: the baseline decodes 255 tokens and pays its start; the arm's passes land L each at C each
    expected = (255 + s_base) / (255 * got.cost / got.landed + s_arm)
    assert got.speedup == pytest.approx(expected)
    assert (got.cell_start, got.baseline_cell_start) == (pytest.approx(s_arm), pytest.approx(s_base))
    # the arm's start is dearer than the baseline's here: the per-cell prediction is the lower one
    assert flat.cell_start == 0.0 and got.speedup < flat.speedup == pytest.approx(flat.landed / flat.cost)
    # a longer cell spreads the start over more tokens, towards the per-pass figure
    long = predict(acc, p, ArmInputs(baseline_token_s=0.002, draft_s_per_token=0.0, plain_share=0.0, n_max=4,
                                     cell_tokens=25500), [4])[0]
    assert got.speedup < long.speedup < flat.speedup
    # an arm whose passes are mostly plain starts as its baseline does
    mostly_plain = ArmInputs(baseline_token_s=0.002, draft_s_per_token=0.0, plain_share=0.6, n_max=4, cell_tokens=255)
    assert predict(acc, p, mostly_plain, [4])[0].cell_start == pytest.approx(s_base)


def test_a_rows_cell_length_is_its_tokens_less_the_one_the_prompt_brings() -> None:
    row = {"status": "ok", "steps": 50, "plain_tokens": 1, "step_cost_tokens": 2.0, "step_s": 0.004, "drafted": 200,
           "draft_s": 0.0, "n_max": 4}
    assert arm_inputs([{**row, "n_tokens": 256}, {**row, "n_tokens": 128}]).cell_tokens == pytest.approx(191)
    # a row that does not say (or says nonsense) makes the length unknown: no per-cell pricing
    assert arm_inputs([{**row, "n_tokens": 256}, row]).cell_tokens == 0.0
    assert arm_inputs([{**row, "n_tokens": "many"}]).cell_tokens == 0.0


@pytest.mark.engine
def test_a_real_run_priced_by_a_recorded_gpu_probe_with_cells_says_so_in_its_report(tmp_path: Any) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[llamacpp]')")
    from lab.render.report import render_json, render_markdown
    from tests.test_width_switches import run_ngram_with_recorded_probe

    cells = {"passes": 6, "widths": {str(w): [0.004 + 0.0002 * w, 0.006, 0.001 + 0.0001 * w, 0.001 + 0.0001 * w,
                                              0.001 + 0.0001 * w, 0.001 + 0.0001 * w] for w in range(1, 7)}}
    recorded, ngram, data = run_ngram_with_recorded_probe(tmp_path, {"cell_s": cells})
    pred = next(p for p in json.loads(render_json(data))["analysis"]["predictions"] if p["arm"] == "ngram")
    own = next(c for c in pred["curve"] if c["n_max"] == 4)
    q = (ngram.plain_tokens - 1) / (ngram.steps + ngram.plain_tokens - 1)
    expected = recorded.cell_start_ratio(1) if q >= 0.5 else recorded.cell_start_ratio(5)
    assert own["cell_start"] == pytest.approx(expected) and own["baseline_cell_start"] == pytest.approx(
        recorded.cell_start_ratio(1))
    text = render_markdown(data)
    assert "A cell's first passes" in text and f"ngram / code {own['cell_start']:.1f}" in text


def _acceptance_file(costs: dict[str, Any]) -> dict[str, Any]:
    from lab.analysis import acceptance_file as ap

    entry = {"scope": "prompt", "arm": "oracle", "prompt": "prose", "backend": "llamacpp", "target": "m",
             "drafter": "oracle", "n_max": 4, "reached": [100, 90, 80, 70], "accepted": [90, 80, 70, 60],
             "costs": costs}
    return {"kind": ap.KIND, "version": 1, "entries": [entry]}


COSTS = {"baseline_token_s": 0.02, "draft_s_per_token": 0.0, "loop_s_per_step": 0.0, "plain_share": 0.0}


def test_an_acceptance_file_carries_its_cell_length_to_another_machines_probe() -> None:
    from lab.analysis import acceptance_file as ap

    entry = ap.from_json(_acceptance_file({**COSTS, "cell_tokens": 255})).entries[0]
    assert entry.costs is not None and entry.costs.cell_tokens == 255
    gpu = _probe()
    got = ap.predict_on(entry, gpu)
    own = next(p for p in got.predictions if p.n_max == 4)
    # priced per cell on the probe's machine, as a run's own report would
    assert (own.cell_start, own.baseline_cell_start) == (pytest.approx(gpu.cell_start_ratio(5)),
                                                        pytest.approx(gpu.cell_start_ratio(1)))
    words = ap.cell_words(entry, gpu)
    assert "cells of 255 tokens" in words and f"{gpu.cell_start_ratio(5):.2f}" in words
    # a file from before it kept the length: priced per pass, and it says why
    old = ap.from_json(_acceptance_file(COSTS)).entries[0]
    assert old.costs is not None and old.costs.cell_tokens == 0.0
    assert next(p for p in ap.predict_on(old, gpu).predictions if p.n_max == 4).cell_start == 0.0
    assert "does not say how long" in ap.cell_words(old, gpu)
    # a probe that timed no cells (a CPU's) prices none
    assert "timed no cells" in ap.cell_words(entry, _probe(None))
    with pytest.raises(ap.AcceptanceFileError, match="cell_tokens"):
        ap.from_json(_acceptance_file({**COSTS, "cell_tokens": -3}))


def test_lab_predict_says_where_a_cells_start_came_from(tmp_path: Any) -> None:
    from lab.base import probe as probes
    from lab.cli import main

    (tmp_path / "acceptance.json").write_text(json.dumps(_acceptance_file({**COSTS, "cell_tokens": 255})))
    probes.save(_probe(), tmp_path / "gpu.json")
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(["predict", str(tmp_path / "acceptance.json"), "--probe", str(tmp_path / "gpu.json")])
    assert rc == 0
    assert "cell starts: cells of 255 tokens after the prompt's (the acceptance file's run)" in out.getvalue()
