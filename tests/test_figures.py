"""A run's figures (lab.render.figures) hold the report's own numbers: each
committed run's figures are drawn and their plotted points read back and
held against what report.md prints for the same run. Runs that lack data
(no steps, one arm failed, damaged files) draw what they can and say what
they could not; the TUI's plots take the same series."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import statistics
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib", reason="figures need matplotlib (a base dependency: pip install -e .)")

from lab.render import draw, figures
from lab.render import figure_data as fd
from lab.render.report import load_for_report, render_markdown, write_report

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
# One committed run of each kind the figures must handle.
IN_PROCESS = RESULTS / "first-command-cpu"
SERVER = RESULTS / "server-kept-share-cpu" / "run"
MLX = RESULTS / "twins-cpu" / "mlx-dflash-run"
SET_ACCEPTANCE = RESULTS / "set-acceptance-h200" / "run"
LLAMACPP_TWIN = RESULTS / "twins-cpu" / "llamacpp-run"
KINDS = {"in-process": IN_PROCESS, "server": SERVER, "mlx": MLX, "set-acceptance": SET_ACCEPTANCE}


@pytest.fixture(scope="module")
def loaded() -> dict[str, dict[str, Any]]:
    return {k: load_for_report(p) for k, p in KINDS.items()}


def _lines(fig: Any) -> list[Any]:
    return [ln for ax in fig.axes for ln in ax.get_lines()]


def _by_gid(fig: Any, gid: str, prompt: str) -> list[Any]:
    """The lines drawn with ``gid`` in the prompt's panel (an error bar's caps left out)."""
    return [ln for ax in fig.axes if ax.get_title() == prompt for ln in ax.get_lines()
            if ln.get_gid() == gid and ln.get_marker() != "_"]


# -- the speedup figure against the report's Prediction table -------------------------


def _prediction_rows(md: str) -> dict[tuple[str, str], list[str]]:
    """The Prediction table's cells by (arm, prompt)."""
    section = md.split("## Prediction", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        if line.startswith("| ") and not line.startswith(("| arm ", "|---")):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[(cells[0].rstrip(" †"), cells[1])] = cells
    return rows


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(KINDS))
def test_the_speedup_figure_plots_the_reports_prediction(kind: str, loaded: dict[str, dict[str, Any]]) -> None:
    data = loaded[kind]
    md = render_markdown(data)
    table = _prediction_rows(md)
    series = fd.speedup(data)
    assert series, f"{kind}: no speedup series"
    predicted = [s for s in series if s.curve_n_max]
    assert predicted, f"{kind}: no prediction drawn"
    fig, _ = figures.draw_speedup([("", s) for s in series], "t")
    for s in predicted:
        cells = table[(s.arm, s.prompt)]
        assert cells[3] == f"{s.measured:.2f}x"
        # the curve column: n_max: speedup, * past the positions measured
        printed = dict(re.findall(r"(\d+): ([\d.]+\*?)", cells[8]))
        for n, y, extra in zip(s.curve_n_max, s.curve_speedup, s.curve_extrapolated):
            if str(n) in printed:
                assert printed[str(n)] == f"{y:.2f}" + ("*" if extra else "")
        # read back from the drawn figure: the solid line is the carried part of the curve
        (line,) = _by_gid(fig, f"predicted::{s.arm}", s.prompt)
        carried = [(n, y) for n, y, x in zip(s.curve_n_max, s.curve_speedup, s.curve_extrapolated) if not x]
        assert list(zip(line.get_xdata(), line.get_ydata())) == carried
        (point,) = _by_gid(fig, f"measured::{s.arm}", s.prompt)
        assert s.measured is not None and list(point.get_ydata()) == [s.measured]
        assert min(s.rounds) <= s.measured <= max(s.rounds)
        if s.held_out is not None:
            assert cells[5].startswith(f"{s.held_out:.2f}x")
            (held,) = _by_gid(fig, f"held-out::{s.arm}", s.prompt)
            assert list(held.get_ydata()) == [s.held_out]


def test_the_held_out_and_extrapolated_marks_are_drawn_apart(loaded: dict[str, dict[str, Any]]) -> None:
    series = fd.speedup(loaded["set-acceptance"])
    assert any(s.held_out is not None for s in series)
    s = next(s for s in series if any(s.curve_extrapolated))
    fig, _ = figures.draw_speedup([("", s)], "t")
    (extra,) = _by_gid(fig, f"extrapolated::{s.arm}", s.prompt)
    (solid,) = _by_gid(fig, f"predicted::{s.arm}", s.prompt)
    assert extra.get_linestyle() != solid.get_linestyle()
    assert extra.get_markerfacecolor() == "none"


# -- T(w) against the probe line the report prints -------------------------------------


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_verify_cost_figure_plots_the_reports_t_of_w(kind: str, loaded: dict[str, dict[str, Any]]) -> None:
    data = loaded[kind]
    md = render_markdown(data)
    probe_lines = [ln for ln in md.splitlines() if ln.startswith("- probe: ")]
    curves = fd.verify_cost(data)
    assert len(curves) == len(probe_lines) >= 1
    fig = figures.draw_verify_cost([("", c) for c in curves], "t")
    for c, printed in zip(curves, probe_lines):
        shown = dict(re.findall(r"(\d+): (\d+\.\d+)", printed.split("T(w) ", 1)[1].split(";", 1)[0]))
        assert shown
        for w, t in zip(c.widths, c.t):
            if str(w) in shown:
                assert shown[str(w)] == f"{t:.2f}"
        (line,) = [ln for ln in _lines(fig) if ln.get_label() == f"{c.label}, kept all"]
        assert list(line.get_ydata()) == list(c.t) and list(line.get_xdata()) == list(c.widths)
    labels = {ln.get_label() for ln in _lines(fig)}
    assert {"T = w (no amortization)", "T = 1 (ideal)"} <= labels


def test_a_server_probe_draws_the_steps_that_kept_none(loaded: dict[str, dict[str, Any]]) -> None:
    from lab.base import probe as probes

    pr = probes.Probe.from_json(loaded["server"]["probe"]) if isinstance(loaded["server"]["probe"], dict) \
        else loaded["server"]["probe"]
    (c,) = fd.verify_cost(loaded["server"])
    expected = [(w, pr.kept_none_ratio(w)) for w in pr.widths if w > 1 and pr.kept_none_ratio(w) is not None]
    assert list(zip(c.kept_none_widths, c.kept_none)) == expected
    if expected:
        assert "kept none" in md_of(loaded["server"])


def md_of(data: dict[str, Any]) -> str:
    return render_markdown(data)


# -- acceptance per position against the report's table ---------------------------------


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_acceptance_figure_plots_the_reports_positions(kind: str, loaded: dict[str, dict[str, Any]]) -> None:
    from lab.render.report import CONDITIONAL_LABEL, UNCONDITIONAL_LABEL

    data = loaded[kind]
    md = render_markdown(data)
    series = fd.acceptance(data)
    assert series
    for s in series:
        cond = next(ln for ln in md.splitlines() if ln.startswith(f"| {s.arm} | {s.prompt} | {CONDITIONAL_LABEL} |"))
        unc = next(ln for ln in md.splitlines() if ln.startswith(f"| {s.arm} | {s.prompt} | {UNCONDITIONAL_LABEL} |"))
        cond_cells = [c.strip() for c in cond.strip("|").split("|")][3:]
        unc_cells = [c.strip() for c in unc.strip("|").split("|")][3:]
        for i, reached in enumerate(s.reached):
            cond_i, unc_i = s.conditional[i], s.unconditional[i]
            if not reached or cond_i is None or unc_i is None:
                continue
            assert cond_cells[i] == f"{cond_i * 100:.0f}% of {reached}"
            assert unc_cells[i] == f"{unc_i * 100:.0f}%"


def test_set_rates_are_drawn_beside_the_measured_acceptance(loaded: dict[str, dict[str, Any]]) -> None:
    data = loaded["set-acceptance"]
    series = fd.acceptance(data)
    set_arms = {r["arm"]: r["set_acceptance"] for r in data["results"] if r.get("set_acceptance")}
    assert set_arms
    md = render_markdown(data)
    for s in series:
        if s.arm in set_arms:
            # the Conditions block prints them: "pos 1 set 0.50, measured 0.51 of 269"
            line = next(ln for ln in md.splitlines() if ln.startswith(f"- {s.arm}: ") and "pos 1 set" in ln)
            printed = [float(x) for x in re.findall(r"pos \d+ set ([\d.]+)", line)]
            assert s.set_rates and [round(x, 2) for x in s.set_rates] == printed
        else:
            assert s.set_rates == ()
    fig, _ = figures.draw_acceptance(series, "t")
    crosses = [ln for ln in _lines(fig) if ln.get_marker() == "x" and ln.get_linestyle() == "None"]
    assert len(crosses) == sum(1 for s in series if s.set_rates)


# -- steps: each cell's mean step cost is the row's step cost ----------------------------


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_steps_figure_holds_each_rows_steps_and_step_cost(kind: str, loaded: dict[str, dict[str, Any]]) -> None:
    data = loaded[kind]
    series = fd.steps_by_arm(data["results"], data["steps"])
    assert series
    for s in series:
        at = 0
        for prompt, rnd, n in s.cells:
            (row,) = [r for r in data["results"] if (r["arm"], r["prompt"], r["round"]) == (s.arm, prompt, rnd)]
            assert n == row["steps"]
            cost = s.cost_tokens[at:at + n]
            if row["step_cost_tokens"] is not None:
                assert statistics.fmean(c for c in cost if c is not None) == pytest.approx(row["step_cost_tokens"],
                                                                                           rel=1e-9)
            assert sum(s.landed[at:at + n]) <= row["n_tokens"]
            at += n
        assert s.max_yield == metrics_max_yield(data, s.arm)


def metrics_max_yield(data: dict[str, Any], arm: str) -> int | None:
    return next(r["max_yield"] for r in data["results"] if r["arm"] == arm)


def test_the_tui_plots_and_the_steps_figure_share_their_series(loaded: dict[str, dict[str, Any]]) -> None:
    from lab.tui.series import series_from_saved

    data = loaded["in-process"]
    arms = [{"name": r["arm"], "is_baseline": r.get("is_baseline"), "n_max": r.get("n_max")}
            for r in {r["arm"]: r for r in data["results"]}.values()]
    tui = series_from_saved(arms, data["results"], data["steps"])
    for s in fd.steps_by_arm(data["results"], data["steps"]):
        assert tui[s.arm].landed == list(s.landed)
        assert tui[s.arm].step_s == list(s.step_s)
        assert tui[s.arm].max_yield == s.max_yield
        assert fd.landed_histogram(tui[s.arm].landed, tui[s.arm].max_yield) == fd.landed_histogram(s.landed,
                                                                                                    s.max_yield)
    plots = (ROOT / "lab" / "tui" / "widgets" / "plots.py").read_text()
    for name in ("LANDED_TITLE", "STEP_COST_TITLE", "MAX_YIELD_LABEL", "landed_histogram", "step_costs"):
        assert f"fd.{name}" in plots


def test_latency_policy_and_memory_are_the_reports(loaded: dict[str, dict[str, Any]]) -> None:
    from lab.analysis import run as analysis
    from lab.render.report import analysis_json

    data = loaded["in-process"]
    assert fd.latency(data) == analysis.latency_summary(data["results"])
    md = render_markdown(data)
    for row in fd.latency(data):
        assert f"| {row['arm']} | {row['prompt']} | {row['ttft_s'] * 1000:.1f} |" in md
    pol = analysis_json(data)["draft_policy"]
    replays = {(r["arm"], r["prompt"]): r for r in pol["replays"]} if isinstance(pol, dict) else {}
    series = fd.policy(data)
    assert series
    for s in series:
        rep = replays[(s.arm, s.prompt)]
        assert s.names[0] == f"fixed {rep['best_fixed_n']}" and s.speedups[0] == rep["best_fixed"]
        assert s.best == rep["best_policy"]
    summaries = analysis.summarize(data["results"])
    for bar in fd.memory(data):
        assert bar.peak_mem_bytes == max(s["peak_mem_bytes"] for s in summaries if s["arm"] == bar.arm)


# -- drawing and writing ------------------------------------------------------------------


@pytest.mark.slow
def test_every_figure_of_a_full_run_is_drawn_as_svg_and_png(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(IN_PROCESS, run)
    shutil.rmtree(run / figures.FIGURE_DIR, ignore_errors=True)
    report = write_report(run).read_text()
    names = [n for n, *_ in fd.FIGURES]
    for name in names:
        svg = run / figures.FIGURE_DIR / f"{name}.svg"
        png = run / figures.FIGURE_DIR / f"{name}.png"
        assert svg.read_bytes().lstrip().startswith(b"<?xml") and b"<svg" in svg.read_bytes()
        assert png.read_bytes().startswith(b"\x89PNG")
        assert f"({figures.FIGURE_DIR}/{name}.svg)" in report
    assert "## Figures" in report and "Not drawn" not in report
    # the same run draws the same bytes (no dates, no random ids)
    again = draw.render(load_for_report(run), ("svg",))
    assert {d.name: d.files["svg"] for d in again.drawn} == {
        n: (run / figures.FIGURE_DIR / f"{n}.svg").read_bytes() for n in names}


@pytest.mark.slow
def test_a_baseline_only_run_draws_what_it_has_and_says_what_not(tmp_path: Path) -> None:
    run = tmp_path / "baseline-only"
    shutil.copytree(IN_PROCESS, run)
    _keep_rows(run, lambda r: bool(r.get("is_baseline")))
    _write_steps(run, [])
    report = write_report(run).read_text()
    drawn = sorted(p.stem for p in (run / figures.FIGURE_DIR).glob("*.svg"))
    assert drawn == ["latency", "memory", "verify-cost"]
    section = report.split("## Figures", 1)[1].split("\n## ", 1)[0]
    assert "Not drawn:" in section
    assert "Speedup by n_max: predicted, measured and held out: no speculative arm finished" in section
    assert "Acceptance per draft position: no speculative steps were saved" in section


@pytest.mark.slow
def test_a_run_with_one_arm_failed_draws_the_others(tmp_path: Path) -> None:
    run = tmp_path / "one-failed"
    shutil.copytree(IN_PROCESS, run)

    def fail(r: dict[str, Any]) -> dict[str, Any]:
        if r["arm"] != "ngram":
            return r
        return {**r, "status": "error", "detail": "engine died", "tok_per_s": None, "speedup": None}

    _map_rows(run, fail)
    write_report(run)
    data = load_for_report(run)
    plan = {p.name: p for p in fd.plan(data)}
    assert all(p.missing is None for p in plan.values())
    assert "ngram" not in {s.arm for s in plan["speedup"].data}
    assert "ngram" not in {s.arm for s in plan["steps"].data}
    assert {"draft-q4_0", "oracle"} <= {s.arm for s in plan["speedup"].data}
    assert (run / figures.FIGURE_DIR / "speedup.svg").is_file()


@pytest.mark.slow
def test_a_damaged_run_draws_what_it_can_and_says_what_it_could_not(tmp_path: Path) -> None:
    run = tmp_path / "damaged"
    shutil.copytree(IN_PROCESS, run)
    (run / "probe.json").write_text("{not json")
    report = write_report(run).read_text()
    assert "not used" in report  # the report names the unreadable probe
    section = report.split("## Figures", 1)[1].split("\n## ", 1)[0]
    assert "Verify cost T(w) against w: the run has no verify-cost probe" in section
    assert (run / figures.FIGURE_DIR / "acceptance.svg").is_file()
    assert not (run / figures.FIGURE_DIR / "verify-cost.svg").exists()
    # a figure whose data cannot be read costs that figure only
    data = load_for_report(run)
    data["results"] = [{**r, "peak_mem_bytes": "lots"} if r["arm"] == "oracle" else r for r in data["results"]]
    out = draw.render(data, ("svg",))
    assert any(x.startswith("Peak memory per arm: could not be drawn (TypeError") for x in out.left_out)
    assert {"speedup", "acceptance", "steps"} <= {d.name for d in out.drawn}
    data["steps"] = [{k: v for k, v in st.items() if k != "landed"} for st in data["steps"]]
    plan = {p.name: p for p in fd.plan(data)}
    assert plan["steps"].missing == "its data could not be read (KeyError: 'landed')"


@pytest.mark.slow
def test_figures_are_not_written_through_a_symlink(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(IN_PROCESS, run)
    shutil.rmtree(run / figures.FIGURE_DIR, ignore_errors=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (run / figures.FIGURE_DIR).symlink_to(outside)
    report = write_report(run).read_text()
    assert list(outside.iterdir()) == []
    assert "No figures: they could not be written" in report


@pytest.mark.slow
def test_compare_figures_overlay_both_runs() -> None:
    a, b = load_for_report(LLAMACPP_TWIN), load_for_report(MLX)
    plan = {p.name: p for p in fd.plan_compare(a, b, "A", "B")}
    speed = plan["compare-speedup"].data
    assert {r for r, _ in speed} == {"A", "B"}
    assert [s for r, s in speed if r == "A"] == fd.speedup(a)
    assert [s for r, s in speed if r == "B"] == fd.speedup(b)
    assert [c for _, c in plan["compare-verify-cost"].data] == fd.verify_cost(a) + fd.verify_cost(b)
    out = figures.draw(list(plan.values()), ("svg",))
    assert [d.name for d in out.drawn] == ["compare-speedup", "compare-verify-cost"]
    fig, _ = figures.draw_speedup(speed, "t")
    gids = {ln.get_gid() for ln in _lines(fig) if ln.get_gid()}
    assert any(g.startswith("measured:A:") for g in gids) and any(g.startswith("measured:B:") for g in gids)


# -- helpers that damage a copied run --------------------------------------------------------


def _results_path(run: Path) -> Path:
    return run / "results.json" if (run / "results.json").exists() else run / "results.json.gz"


def _load(run: Path) -> dict[str, Any]:
    p = _results_path(run)
    raw = gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()
    return json.loads(raw)  # type: ignore[no-any-return]


def _save(run: Path, data: dict[str, Any]) -> None:
    p = _results_path(run)
    p.unlink()
    (run / "results.json").write_text(json.dumps(data))


def _keep_rows(run: Path, keep: Any) -> None:
    data = _load(run)
    data["results"] = [r for r in data["results"] if keep(r)]
    _save(run, data)


def _map_rows(run: Path, change: Any) -> None:
    data = _load(run)
    data["results"] = [change(r) for r in data["results"]]
    _save(run, data)


def _write_steps(run: Path, steps: list[dict[str, Any]]) -> None:
    for name in ("steps.jsonl", "steps.jsonl.gz"):
        (run / name).unlink(missing_ok=True)
    (run / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))


def test_pass_kinds_are_marked_on_the_step_costs_where_the_loop_told_them() -> None:
    data = load_for_report(RESULTS / "cross-machine" / "gpu-4" / "run-3" / "run")
    series = fd.steps_by_arm(data["results"], data["steps"])
    told = [s for s in series if s.pass_kinds]
    assert told
    fig, _ = figures.draw_steps(series, "t")
    for s in told:
        assert len(s.pass_kinds) == len(s.landed)
        for kind in {k for k in s.pass_kinds if k and k != "steady"}:
            (marks,) = [ln for ln in _lines(fig) if ln.get_label() == f"{kind} pass"
                        and list(ln.get_xdata()) == [i + 1 for i, k in enumerate(s.pass_kinds) if k == kind]]
            assert list(marks.get_ydata()) == [c for c, k in zip(s.cost_tokens, s.pass_kinds) if k == kind]


@pytest.mark.slow
def test_gpu_memory_and_power_are_the_reports_gpu_section(loaded: dict[str, dict[str, Any]]) -> None:
    data = loaded["set-acceptance"]
    section = render_markdown(data).split("## GPU: memory and energy", 1)[1].split("\n## ", 1)[0]
    bars = [b for b in fd.memory(data) if b.gpu_peak_mem_bytes is not None]
    assert bars
    for bar in bars:
        line = next(ln for ln in section.splitlines() if ln.startswith(f"| {bar.arm} |"))
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert bar.gpu_mean_power_w is not None and cells[3] == f"{bar.gpu_mean_power_w:.0f}"
        assert cells[5].split(" / ")[0] == f"{bar.gpu_peak_mem_bytes / 2**30:.2f} GiB"
    fig = figures.draw_memory(fd.memory(data), "Peak memory per arm")
    assert [ax.get_xlabel() for ax in fig.axes] == ["peak memory MiB (host)", "peak GPU memory GiB",
                                                   "mean GPU power W"]
