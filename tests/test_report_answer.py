"""A report opens with its answer: one sentence per stack (does it pay, by
how much, why in step arithmetic, what to run next), how the cells ran,
then the speedup and T(w) figures; the Conditions section leads with one
line; every section has a stable id, and the HTML page places its figures
by id and folds the conditions' detail."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest

from lab.analysis import run as analysis
from lab.render import answer, html, sections
from lab.render.report import load_for_report, render_markdown

ROOT = Path(__file__).resolve().parents[1]
# the committed first command: ngram pays on code and loses on prose, the Q4_0 draft is a structural loss
DEMO = ROOT / "results" / "first-command-cpu"


@pytest.fixture(scope="module")
def demo() -> dict[str, Any]:
    return load_for_report(DEMO)


def _sentences(data: dict[str, Any]) -> list[str]:
    return answer.sentences(data["results"], analysis.summarize(data["results"], analysis.ran_paired(data)))


def test_one_sentence_per_stack_says_pays_loses_and_structural_with_the_arithmetic(demo: dict[str, Any]) -> None:
    (line,) = _sentences(demo)
    summaries = {(s["arm"], s["prompt"]): s for s in analysis.summarize(demo["results"], analysis.ran_paired(demo))}
    code, prose = summaries[("ngram", "code")], summaries[("ngram", "prose")]
    assert line.startswith("**llamacpp / embedded:smollm2**: ")
    # the kinds and changes are the summaries' own
    # ngram's two paired rounds on code disagree (0.99x, 1.18x): pays as measured, said uncertain
    assert code["verdict_kind"] == "uncertain" and not code["contended"]
    assert (f"ngram pays on code ({(code['speedup'] - 1) * 100:+.0f} %, rounds disagree) and loses on prose "
            f"({(prose['speedup'] - 1) * 100:+.0f} %)") in line
    assert f"lands {prose['mean_accepted_len']:.2f} on prose, {code['mean_accepted_len']:.2f} on code" in line
    q4 = [summaries[("draft-q4_0", p)]["step_cost_tokens"] for p in ("prose", "code")]
    assert ("draft-q4_0 is a structural loss on both prompts" in line
            and f"a step costs {min(q4):.1f}–{max(q4):.1f} baseline tokens and can land at most 5" in line)
    assert "oracle pays on both prompts" in line and "lands 4.99 on both" in line
    # what to run next: the arm to keep, what the loser needs, and that the structural loss needs a cheaper step
    nxt = line.split(" Next: ", 1)[1]
    assert nxt.startswith("run ngram with more rounds") and "keep oracle" in nxt and "ngram on prose needs" in nxt and "draft-q4_0 can pay only with a cheaper step" in nxt


def test_a_busy_run_is_uncertain_yet_says_what_it_measured_and_to_run_again(demo: dict[str, Any]) -> None:
    busy = copy.deepcopy(demo)
    for r in busy["results"]:
        r["contended"] = True
    (line,) = _sentences(busy)
    assert "ngram (uncertain: the machine was busy) pays on code" in line
    assert "draft-q4_0 (uncertain: the machine was busy) is a structural loss" in line
    assert line.split(" Next: ", 1)[1].startswith("run ngram, draft-q4_0, oracle again on a quiet machine")


def test_a_looping_output_is_said_once_per_stack(demo: dict[str, Any]) -> None:
    looped = copy.deepcopy(demo)
    for r in looped["results"]:
        if r["prompt"] == "code":
            r["degenerate_output"] = "repeats a 44-character pattern over the last 70% of the output"
    (line,) = _sentences(looped)
    assert line.count("the output loops on code: acceptance there is not representative") == 1


def test_each_stack_gets_its_own_sentence(demo: dict[str, Any]) -> None:
    twice = copy.deepcopy(demo)
    extra = []
    for r in demo["results"]:
        moved = {**r, "arm": f"{r['arm']}-b", "backend": "mlx"}
        if r.get("baseline_arm"):
            moved["baseline_arm"] = f"{r['baseline_arm']}-b"
        extra.append(moved)
    twice["results"] = demo["results"] + extra
    lines = _sentences(twice)
    assert [line.split("**")[1] for line in lines] == ["llamacpp / embedded:smollm2", "mlx / embedded:smollm2"]


def test_the_order_line_says_how_cells_ran_and_which_engines_stayed_loaded() -> None:
    order = {"order": "paired", "words": "paired: each prompt and round ran its baseline's cell, then every arm's",
             "groups": [{"arms": ["baseline", "ngram", "big"], "resident": ["baseline", "ngram"],
                         "note": "big does not fit beside them"}],
             "added": [{"round": 3, "prompts": ["code"], "why": "ngram / code spread 20% around 0.75x (0.83x, 0.68x)"}]}
    line = answer.order_line(order)
    assert line is not None and line.startswith("Cells ran paired: each prompt and round")
    assert "Engines kept loaded between cells: baseline, ngram (big does not fit beside them)" in line
    assert "loaded again for each cell, outside the timing: big" in line
    assert "Rounds added because paired speedups disagreed: r3 (ngram / code)" in line
    assert answer.order_line(None) is None


def test_report_md_opens_with_the_answer_then_the_figures_then_the_table(demo: dict[str, Any]) -> None:
    md = render_markdown(demo)
    head = md.split("\n## Results", 1)[0]
    assert head.startswith("# demo\n\n## The answer\n\n- **llamacpp / embedded:smollm2**: ")
    figures = re.findall(r"^!\[[^\]]*\]\((figures/[\w-]+\.svg)\)$", head, re.M)
    assert figures == ["figures/speedup.svg", "figures/verify-cost.svg"]
    assert md.index("## The answer") < md.index("## Results") < md.index("| arm | prose:")
    conditions = md.split("## Conditions\n\n", 1)[1]
    assert conditions.startswith("In short: quiet machine (other processes used at most ")
    assert "one text per prompt on every arm" in conditions.split("\n", 1)[0]


def test_every_heading_the_report_writes_has_a_stable_id(demo: dict[str, Any]) -> None:
    md = render_markdown(demo)
    titles = [line[3:] for line in md.splitlines() if line.startswith("## ")]
    assert titles and all(t in sections.SECTIONS.values() for t in titles), titles
    assert sections.section_id("Why: the step arithmetic") == "why"
    assert sections.section_id("What to run") == "what-to-run"  # a heading the table does not know yet


@pytest.mark.slow
def test_the_page_has_sections_by_id_the_lead_figures_after_the_answer_and_folded_conditions(
        demo: dict[str, Any]) -> None:
    text = html.render_html(demo)
    ids = re.findall(r'<section id="([\w-]+)">', text)
    assert ids[:3] == ["answer", "results", "conditions"]
    answer_part = text.split('<section id="answer">', 1)[1].split("</section>", 1)[0]
    assert re.findall(r'<figure id="fig-([\w-]+)">', answer_part) == ["speedup", "verify-cost"]
    acceptance = text.split('<section id="acceptance">', 1)[1].split("</section>", 1)[0]
    assert 'id="fig-acceptance"' in acceptance
    conditions = text.split('<section id="conditions">', 1)[1].split("</section>", 1)[0]
    summary, folded = conditions.split("<details>", 1)
    assert "In short:" in summary and "Machine:" not in summary and "Machine:" in folded


def test_a_step_that_is_all_verify_blames_the_backend_not_the_draft(demo: dict[str, Any]) -> None:
    """The oracle drafts for free: when its step still costs more than it can
    land, the verify is the cost, and the next step says so (the Q4_0 draft's
    own structural loss stays the draft's)."""
    slow = copy.deepcopy(demo)
    base = {(r["prompt"], r["round"]): r["tok_per_s"] for r in slow["results"] if r["arm"] == "baseline"}
    for r in slow["results"]:
        if r["arm"] == "oracle" and r["status"] == "ok":
            # the speedups are paired: the oracle's tok/s against its round's baseline
            r["step_cost_tokens"], r["speedup"] = 5.4, 0.93
            r["tok_per_s"] = base[(r["prompt"], r["round"])] * 0.93
    (line,) = _sentences(slow)
    assert "oracle is a structural loss on both prompts" in line
    nxt = line.split(" Next: ", 1)[1]
    assert "for oracle the verify alone costs more than a step can land" in nxt
    assert "draft-q4_0 can pay only with a cheaper step (a faster draft" in nxt
