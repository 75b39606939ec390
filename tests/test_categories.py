"""Per-category results: the category every row records, the table of
acceptance, mean accepted length and paired speedup per category (checked
against figures worked out by hand), its place in report.md, the CSV and the
JSON analysis, the TUI widget, and one short real run on SmolLM2."""

from __future__ import annotations

import csv
import io
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lab.analysis import stats
from lab.analysis.categories import ALL, UNCATEGORIZED, category_table
from lab.base.events import Status
from lab.base.profile import Arm
from lab.base.row import ResultRow
from lab.profile.load import parse_profile
from lab.render.categories import markdown_lines
from lab.render.report import render
from lab.rows.build import build_result
from lab.runner import Runner
from tests.fakes import BASE_AND_SPEC, fake_registry

pytestmark = pytest.mark.anyio


def row(arm: str, prompt: str, category: str | None, tps: float | None, *, rnd: int = 1, status: str = "ok",
        drafted: int | None = None, accepted: int | None = None, steps: int | None = None,
        n: int | None = None, plain: int | None = None) -> dict[str, Any]:
    base = arm == "base"
    return {
        "arm": arm, "prompt": prompt, "category": category, "round": rnd, "status": status, "tok_per_s": tps,
        "is_baseline": base, "baseline_arm": None if base else "base", "backend": "fake", "drafter": None if base else "d",
        "drafted": drafted, "accepted": accepted, "steps": steps, "n_tokens": n, "plain_tokens": plain,
        "mean_accepted_len": None if not steps or n is None or plain is None else (n - plain) / steps,
    }


def hand_rows() -> list[dict[str, Any]]:
    """Two categories over two prompts each, two rounds; one failed round and
    a warmup row that must not count."""
    return [
        row("base", "a1", "edit", 100.0), row("base", "a1", "edit", 100.0, rnd=2),
        row("base", "a2", "edit", 50.0), row("base", "a2", "edit", 50.0, rnd=2),
        row("base", "b1", "qa", 80.0), row("base", "b1", "qa", 80.0, rnd=2),
        row("spec", "a1", "edit", 200.0, drafted=40, accepted=30, steps=10, n=42, plain=2),
        row("spec", "a1", "edit", 150.0, rnd=2, drafted=40, accepted=20, steps=10, n=32, plain=2),
        row("spec", "a2", "edit", 100.0, drafted=20, accepted=20, steps=5, n=26, plain=1),
        row("spec", "a2", "edit", None, rnd=2, status="error"),
        row("spec", "a2", "edit", 999.0, rnd=0, drafted=100, accepted=100, steps=1, n=101, plain=0),
        row("spec", "b1", "qa", 40.0, drafted=16, accepted=4, steps=4, n=10, plain=2),
        row("spec", "b1", "qa", 20.0, rnd=2, drafted=16, accepted=0, steps=4, n=4, plain=0),
    ]


# -- the category in every row ---------------------------------------------------


def test_category_survives_results_json_and_old_saves_read_as_none() -> None:
    r = ResultRow(arm="a", backend="fake", drafter=None, prompt="qa-1", round=1, status=Status.OK, category="qa")
    saved = json.loads(json.dumps(r.to_json()))
    assert saved["category"] == "qa" and r["category"] == "qa"
    assert ResultRow.from_json(saved) == r
    old = {k: v for k, v in saved.items() if k != "category"}
    back = ResultRow.from_json(old)
    assert back.category is None and back.to_json()["category"] is None and not back.unknown


def test_build_result_records_the_category() -> None:
    arm = Arm("b", "fake", None, None, None, {}, {}, None, True, "fake", "b")
    assert build_result(arm=arm, prompt="p", round=1, status="error", category="math").category == "math"
    assert build_result(arm=arm, prompt="p", round=1, status="error").category is None


def test_runner_gives_suite_prompts_their_category_and_plain_ones_none() -> None:
    text = (
        '[run]\nmax_tokens = 8\nrounds = 1\nwarmup = 0\n\n[[prompts]]\nname = "mine"\ntext = "hi"\n\n'
        '[[prompts]]\nsuite = "speclab"\ncategories = ["qa", "editing"]\nper_category = 1\n' + BASE_AND_SPEC
    )
    registry = fake_registry()
    profile = parse_profile(text, "p.toml", registry)
    rows = Runner(profile, registry).run()
    got = {(r.arm, r.prompt): r.category for r in rows}
    want = {p.name: p.category for p in profile.prompts}
    assert len(rows) == 2 * 3 and got == {(a, p): c for a in ("base", "spec") for p, c in want.items()}
    assert sorted(c for c in want.values() if c) == ["editing", "qa"]
    # live rows feed the table as saved ones do
    table = {(r.arm, r.category) for r in category_table(rows)}
    assert table == {("spec", UNCATEGORIZED), ("spec", "qa"), ("spec", "editing"), ("spec", ALL)}


# -- the table's arithmetic --------------------------------------------------------


def test_table_matches_hand_computed_figures() -> None:
    table = {(r.arm, r.category): r for r in category_table(hand_rows())}
    assert set(table) == {("spec", "edit"), ("spec", "qa"), ("spec", ALL)}  # no rows for the baseline
    edit, qa, every = table[("spec", "edit")], table[("spec", "qa")], table[("spec", ALL)]
    # edit: ok recorded rows a1 r1, a1 r2, a2 r1 (a2 r2 failed, round 0 is warmup)
    assert (edit.drafted, edit.accepted, edit.prompts) == (100, 70, 2)
    assert edit.acceptance_rate == pytest.approx(0.70)
    assert edit.mean_accepted_len == pytest.approx((40 + 30 + 25) / 25)  # landed / steps
    ratios = [2.0, 1.5, 2.0]  # a1 r1, a1 r2, a2 r1 over their baselines
    assert edit.pairs == 3
    assert edit.speedup == pytest.approx(math.prod(ratios) ** (1 / 3))
    # three pairs: fewer than a bootstrap needs, so the estimate alone
    assert edit.speedup_low is None and edit.speedup_high is None
    # qa: 4 of 32 accepted, (8 + 4) landed over 8 steps, ratios 0.5 and 0.25
    assert qa.acceptance_rate == pytest.approx(4 / 32) and qa.mean_accepted_len == pytest.approx(12 / 8)
    assert qa.speedup == pytest.approx(math.sqrt(0.5 * 0.25)) and qa.pairs == 2
    # all: pooled over both categories
    assert every.acceptance_rate == pytest.approx(74 / 132)
    assert every.mean_accepted_len == pytest.approx((95 + 12) / 33)
    assert every.speedup == pytest.approx(math.prod([2.0, 1.5, 2.0, 0.5, 0.25]) ** (1 / 5)) and every.pairs == 5
    # five pairs: the bootstrap's interval, in the pairs' order (prompt, then round)
    iv = stats.bootstrap_geomean([2.0, 1.5, 2.0, 0.5, 0.25])
    assert (every.speedup_low, every.speedup_high) == pytest.approx((iv.low, iv.high))
    assert every.speedup_low < every.speedup < every.speedup_high
    assert every.prompts == 3


def test_one_pair_gives_an_estimate_without_interval() -> None:
    rows = [row("base", "p", "qa", 100.0), row("spec", "p", "qa", 150.0, drafted=8, accepted=4, steps=2, n=6, plain=0)]
    (r,) = category_table(rows)
    assert r.speedup == pytest.approx(1.5) and r.speedup_low is None and r.speedup_high is None
    assert r.call == stats.ONE_PAIR and r.mean_accepted_len == pytest.approx(3.0)


def test_plain_prompts_mixed_in_are_uncategorized() -> None:
    rows = hand_rows() + [row("base", "mine", None, 10.0), row("spec", "mine", None, 30.0, drafted=4, accepted=4, steps=1, n=5, plain=0)]
    table = {(r.arm, r.category): r for r in category_table(rows)}
    assert table[("spec", UNCATEGORIZED)].speedup == pytest.approx(3.0)
    assert table[("spec", ALL)].pairs == 6


def test_markdown_section_lists_every_category_and_the_first_turn_note() -> None:
    lines = markdown_lines(hand_rows(), [{"name": "a1", "turns": 3}, {"name": "b1", "turns": 1}])
    text = "\n".join(lines)
    assert lines[0].startswith("| arm | category | prompts | acceptance | mean accepted len | speedup")
    assert "| spec | edit | 2 | 70.0% | 3.80 |" in text
    assert "| spec | qa | 1 | 12.5% | 1.50 | 0.35x | 2 | slower |" in text  # two pairs: no interval
    assert "| spec | **all** | 3 |" in text and "| 5 |" in text.split("**all**")[1]
    assert "[" in text.split("**all**")[1].split("\n")[0]  # five pairs: an interval
    assert "first turn only" in text and ": 1." in text
    assert "Below 5 pairs no interval is given" in text  # 2 and 3 pairs
    assert "No prompt categories" in markdown_lines([row("base", "p", None, 1.0)])[0]


# -- the report's formats ---------------------------------------------------------------


def _data(results: list[dict[str, Any]]) -> dict[str, Any]:
    prompts = [{"name": p, "text": "x", "system": None, "category": c, "turns": 1}
               for p, c in dict.fromkeys((r["prompt"], r["category"]) for r in results)]
    return {"profile": {"name": "t", "run": {"max_tokens": 8, "rounds": 2, "warmup": 0}, "prompts": prompts},
            "results": [ResultRow.from_json(r).to_json() for r in results], "started": "now"}


def test_report_md_csv_and_json_carry_the_categories() -> None:
    data = _data(hand_rows())
    md = render(data, "md")
    assert "## Per category" in md and "| spec | edit | 2 | 70.0% |" in md
    rows = list(csv.DictReader(io.StringIO(render(data, "csv"))))
    assert "category" in rows[0] and len(rows) == len(hand_rows())
    assert [r["category"] for r in rows] == [str(r["category"]) for r in hand_rows()]
    cats = json.loads(render(data, "json"))["analysis"]["categories"]
    assert {(c["arm"], c["category"]) for c in cats} == {("spec", "edit"), ("spec", "qa"), ("spec", ALL)}
    assert next(c for c in cats if c["category"] == "qa")["accepted"] == 4


def test_a_run_without_categories_has_no_section() -> None:
    plain = [dict(r, category=None) for r in hand_rows()]
    assert "## Per category" not in render(_data(plain), "md")
    assert json.loads(render(_data(plain), "json"))["analysis"]["categories"][0]["category"] == UNCATEGORIZED


# -- the TUI widget ------------------------------------------------------------------------


async def test_category_table_widget_shows_and_refreshes_rows() -> None:
    from textual.app import App, ComposeResult

    from lab.tui.widgets.categories import CategoryTable, row_key

    class Host(App[None]):
        def compose(self) -> ComposeResult:
            yield CategoryTable(hand_rows()[:7], id="cats")

    app = Host()
    async with app.run_test(size=(120, 20)) as pilot:
        table = app.query_one("#cats", CategoryTable)
        await pilot.pause()
        # only category edit so far: no "all" row, one pair
        assert table.row_count == 1
        cells = [str(c) for c in table.get_row(row_key("spec", "edit"))]
        assert cells[:6] == ["spec", "edit", "1", "75%", "4.00", "2.00x"] and cells[7] == stats.ONE_PAIR
        table.show_rows(hand_rows())
        await pilot.pause()
        assert table.row_count == 3
        cells = [str(c) for c in table.get_row(row_key("spec", "qa"))]
        assert cells[3] == "12%" and cells[5] == "0.35x" and "–" not in cells[6]  # two pairs: no interval
        assert "–" in str(table.get_row(row_key("spec", ALL))[6])  # five
        assert str(table.get_row(row_key("spec", ALL))[1]) == ALL


# -- one real run on the embedded model ---------------------------------------------------------


REAL = """
[profile]
name = "cats"

[run]
max_tokens = 16
rounds = 1
warmup = 0
n_ctx = 1024
threads = 1
probe = false

[[prompts]]
suite = "speclab"
categories = ["editing", "qa"]
per_category = 1

[[arms]]
name = "baseline"
backend = "llamacpp"
model = "embedded:smollm2"

[[arms]]
name = "ngram"
backend = "llamacpp"
model = "embedded:smollm2"
drafter = "ngram"
n_max = 3
"""


@pytest.mark.slow
def test_real_run_reports_per_category(tmp_path: Path) -> None:
    from tests.test_probe import engine_problem

    why = engine_problem()
    if why:
        pytest.skip(why)
    (tmp_path / "cats.toml").write_text(REAL)
    out = subprocess.run([sys.executable, "-m", "lab.cli", "run", "cats.toml", "--out", "runs", "--quiet"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    run_dir = next((tmp_path / "runs").iterdir())
    results = json.loads((run_dir / "results.json").read_text())["results"]
    assert len(results) == 4 and all(r["status"] == "ok" for r in results)
    assert sorted(r["category"] for r in results) == ["editing", "editing", "qa", "qa"]
    md = (run_dir / "report.md").read_text()
    assert "## Per category" in md
    for category in ("editing", "qa"):
        spec = next(r for r in results if r["arm"] == "ngram" and r["category"] == category)
        line = next(x for x in md.splitlines() if x.startswith(f"| ngram | {category} | 1 |"))
        rate = "—" if not spec["drafted"] else f"{spec['accepted'] / spec['drafted'] * 100:.1f}%"
        assert f"| {rate} |" in line and "x" in line.split("|")[6]
    assert "| ngram | **all** | 2 |" in md
