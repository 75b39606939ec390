"""Draft-policy replay (lab.analysis.policy) on hand-made steps and a
hand-made probe, the live policy's profile key, and one real run."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from lab.analysis import policy, predict
from lab.analysis.measured_acceptance import per_position
from lab.base import draft_policy
from lab.base.probe import Probe

# T(w) = 1 + 0.3 (w - 1): verifying is cheap but not free
PROBE = Probe("llamacpp", "m", "decode", (1, 2, 3, 4, 5), ((0.010, 0.013, 0.016, 0.019, 0.022),))
PRICES = (1.0, 1.3, 1.6, 1.9, 2.2)  # C(n), no draft or loop cost


def _steps(pairs: list[tuple[int, int]], round: int = 1, arm: str = "a", prompt: str = "p") -> list[dict[str, Any]]:
    return [{"arm": arm, "prompt": prompt, "round": round, "index": i, "drafted": d, "accepted": a,
             "landed": a + 1} for i, (d, a) in enumerate(pairs)]


def _row(steps: list[dict[str, Any]], n_max: int = 4, round: int = 1, draft_s: float = 0.0) -> dict[str, Any]:
    """A row whose baseline token took 10 ms, as the probe's one-row pass did."""
    cost = sum(PRICES[s["drafted"]] for s in steps) / len(steps)
    return {"arm": "a", "prompt": "p", "round": round, "status": "ok", "steps": len(steps),
            "drafted": sum(s["drafted"] for s in steps), "draft_s": draft_s, "step_s": cost * 0.010,
            "step_cost_tokens": cost, "plain_tokens": 1, "n_max": n_max, "drafter": "x", "is_baseline": False}


# Runs the drafter gets right end to end, then stretches where it gets nothing right.
EASY_THEN_HARD = ([(4, 4)] * 10 + [(4, 0)] * 10) * 3
# Every step keeps three of four drafts.
THREE_OF_FOUR = [(4, 3)] * 30


def test_grow_shrink_beats_the_best_fixed_n_where_acceptance_comes_in_stretches() -> None:
    steps = _steps(EASY_THEN_HARD)
    fixed = {n: policy.replay_fixed(steps, n, PRICES, 4).speedup for n in range(1, 5)}
    # per block: 10 steps land 5, 10 land 1, 20 steps at C(4) = 2.2
    assert fixed[4] == pytest.approx(60 / 44)
    assert max(fixed, key=lambda n: fixed[n] or 0) == 4
    grown = policy.replay_stream([policy.stream(steps)], draft_policy.GROW_SHRINK, 4, PRICES, 4)
    assert grown.tokens == sum(a + 1 for _, a in EASY_THEN_HARD)  # the same text, cut otherwise
    assert grown.speedup is not None and grown.speedup > fixed[4] * 1.1

    rep = policy.replay_cell("a", "p", [_row(steps)], {1: steps}, PROBE)
    assert rep is not None
    best_fixed, best, headroom = rep.best_fixed(), rep.best(), rep.headroom()
    assert best_fixed is not None and best_fixed[0] == 4
    assert best is not None and best[0] in policy.ADAPTIVE
    assert headroom is not None and headroom > 1.1


def test_grow_shrink_does_not_beat_the_best_fixed_n_where_every_step_fails_at_the_same_place() -> None:
    steps = _steps(THREE_OF_FOUR)
    fixed = {n: policy.replay_fixed(steps, n, PRICES, 4).speedup for n in range(1, 5)}
    assert fixed[3] == pytest.approx(4 / 1.9)  # lands all three kept and the target's token, drafting no more
    grown = policy.replay_stream([policy.stream(steps)], draft_policy.GROW_SHRINK, 4, PRICES, 4)
    assert grown.speedup is not None and grown.speedup < fixed[3] * 0.99
    rep = policy.replay_cell("a", "p", [_row(steps)], {1: steps}, PROBE)
    assert rep is not None and rep.best() == ("fixed 3", pytest.approx(4 / 1.9))
    assert rep.headroom() == pytest.approx(1.0)


def test_the_replay_refuses_more_drafts_than_the_recording_made() -> None:
    steps = _steps(THREE_OF_FOUR)
    wide = (*PRICES, 2.5)
    with pytest.raises(policy.ReplayRefused, match="n_max 4"):
        policy.replay_fixed(steps, 5, wide, 4)
    with pytest.raises(policy.ReplayRefused, match="n_max 4"):
        policy.replay_stream([policy.stream(steps)], draft_policy.GROW_SHRINK, 5, wide, 4)
    # nor past what the probe measured
    with pytest.raises(policy.ReplayRefused, match="probe"):
        policy.replay_fixed(steps, 4, PRICES[:3], 4)


def test_fixed_n_max_replayed_is_the_in_sample_prediction() -> None:
    steps = _steps([(4, 4), (4, 0), (4, 2), (4, 1), (4, 3), (4, 4), (4, 0)])
    row = _row(steps, draft_s=0.0004)  # a draft token at 0.01 baseline tokens
    row["plain_tokens"] = 4  # three plain decodes besides the prompt's token
    inputs = predict.arm_inputs([row])
    assert inputs is not None
    expected = predict.predict(per_position(steps), PROBE, inputs, [4])[0].speedup
    rep = policy.replay_cell("a", "p", [row], {1: steps}, PROBE)
    assert rep is not None
    assert rep.fixed[4].speedup == pytest.approx(expected)
    assert rep.recorded.speedup == pytest.approx(expected)
    # re-chunked along the text, fixed n_max stays on the recorded anchors: the same figure
    prices = policy.step_prices(PROBE, inputs, 4)
    streamed = policy.replay_stream([policy.stream(steps)], draft_policy.FIXED, 4, prices, 4, plain=3)
    assert streamed.speedup == pytest.approx(expected)


def test_a_server_step_is_replayed_at_the_share_it_kept_as_the_prediction_prices_it() -> None:
    from lab.base.probe import PRICES_STEPS

    # a server probe: steps that kept all cost 1.3-2.2 baseline tokens, steps that kept none 0.2 less
    server = Probe("llamacpp-server", "m", "server-steps", (1, 2, 3, 4, 5), ((0.010, 0.013, 0.016, 0.019, 0.022),),
                   notes={"prices": PRICES_STEPS, "kept_none_s": {"2": 0.011, "3": 0.014, "4": 0.017, "5": 0.020}})
    steps = _steps([(4, 4), (4, 0), (4, 2), (4, 1), (4, 3), (4, 4), (4, 0)])
    row = _row(steps)
    inputs = predict.arm_inputs([row])
    assert inputs is not None
    expected = predict.predict(per_position(steps), server, inputs, [4])[0]
    assert expected.kept_share is not None
    rep = policy.replay_cell("a", "p", [row], {1: steps}, server)
    assert rep is not None
    assert rep.fixed[4].speedup == pytest.approx(expected.speedup)
    assert rep.recorded.speedup == pytest.approx(expected.speedup)
    # the step that kept all its 4 drafts costs C(4); the one that kept none 0.2 less
    none = policy.kept_none_prices(server, 4)
    assert none == pytest.approx((1.0, 1.1, 1.4, 1.7, 2.0))
    assert policy.replay_fixed(_steps([(4, 4)]), 4, PRICES, 4, none=none).cost == pytest.approx(2.2)
    assert policy.replay_fixed(_steps([(4, 0)]), 4, PRICES, 4, none=none).cost == pytest.approx(2.0)
    assert policy.replay_fixed(_steps([(4, 2)]), 4, PRICES, 4, none=none).cost == pytest.approx(2.1)
    assert policy.kept_none_prices(PROBE, 4) is None


def test_a_step_after_one_that_kept_all_pays_the_drafts_catch_up() -> None:
    """A draft model reads two tokens after a step that kept all it drafted
    (its last draft and the target's): the replay adds that catch-up to
    such a step, so a shorter n that keeps all more often pays it more often."""
    cells = [policy.stream(_steps(THREE_OF_FOUR))]
    four = policy.replay_stream(cells, draft_policy.FIXED, 4, PRICES, 4, catch_up=0.5)
    three = policy.replay_stream(cells, draft_policy.FIXED, 3, PRICES, 4, catch_up=0.5)
    assert four.cost == pytest.approx(30 * 2.2)  # no step kept all four
    assert three.cost == pytest.approx(30 * 1.9 + 29 * 0.5)  # every step but the first follows a full one
    # on the recorded anchors too, and each round starts afresh
    two_rounds = _steps([(4, 4), (4, 4), (4, 0)], round=1) + _steps([(4, 4), (4, 1)], round=2)
    assert policy.replay_fixed(two_rounds, 4, PRICES, 4, catch_up=0.5).cost == pytest.approx(5 * 2.2 + 3 * 0.5)

    # from a run's steps: the catch-up the steps show, out of the per-token price and on the steps that pay it
    steps = _steps(EASY_THEN_HARD)
    for prev, cur in zip(steps, steps[1:]):
        cur["draft_s"] = 0.0044 if prev["accepted"] == prev["drafted"] else 0.0024
    steps[0]["draft_s"] = 0.0024
    row = _row(steps, draft_s=sum(s["draft_s"] for s in steps) / len(steps))
    inputs = predict.arm_inputs([row], steps)
    assert inputs is not None and inputs.catch_up_s == pytest.approx(0.002)
    prices = policy.step_prices(PROBE, inputs, 4)
    assert prices[4] == pytest.approx(2.2 + 0.0024 / 0.010)  # a step drafts 0.24 baseline tokens without its catch-up
    assert policy.catch_up_price(PROBE, inputs) == pytest.approx(0.2)
    rep = policy.replay_cell("a", "p", [row], {1: steps}, PROBE)
    assert rep is not None
    after_full = sum(1 for prev in steps[:-1] if prev["accepted"] == prev["drafted"])
    assert rep.recorded.cost == pytest.approx(60 * prices[4] + after_full * 0.2)
    assert rep.fixed[4].cost == pytest.approx(rep.recorded.cost)


def test_a_short_draft_is_priced_at_what_it_drafted() -> None:
    # an n-gram lookup that found two tokens, both kept: the step verified 3 rows
    steps = _steps([(2, 2)])
    assert policy.replay_fixed(steps, 4, PRICES, 4).cost == pytest.approx(PRICES[2])
    assert policy.replay_fixed(steps, 1, PRICES, 4).landed == 2


def test_the_live_rule() -> None:
    grow = draft_policy.GROW_SHRINK
    assert draft_policy.next_length(grow, 3, 3, 3, 4) == 4
    assert draft_policy.next_length(grow, 4, 4, 4, 4) == 4  # bounded by n_max
    assert draft_policy.next_length(grow, 4, 4, 1, 4) == 3
    assert draft_policy.next_length(grow, 1, 1, 0, 4) == 1  # never below one
    assert draft_policy.next_length(draft_policy.GROW_HALVE, 4, 4, 1, 4) == 2
    assert draft_policy.next_length(draft_policy.FIXED, 2, 2, 0, 4) == 4


PROFILE = """
[run]
max_tokens = 48
rounds = 1
warmup = 0
threads = 1

[[prompts]]
name = "code"
text = "Write a Python function that reverses a list, then one that sorts it."

[[arms]]
name = "baseline"
backend = "llamacpp"
model = "embedded:smollm2"

[[arms]]
name = "ngram"
backend = "llamacpp"
model = "embedded:smollm2"
drafter = "ngram"
n_max = 4

[[arms]]
name = "ngram-gs"
backend = "llamacpp"
model = "embedded:smollm2"
drafter = "ngram"
n_max = 4
{policy}
"""


@pytest.mark.parametrize(("line", "message"), [
    ('draft_policy = "grow-shrnk"', "unknown draft_policy 'grow-shrnk': use one of fixed, grow-shrink, "
                                    "grow-halve; did you mean 'grow-shrink'?"),
    ("draft_policy = 3", "draft_policy"),
])
def test_a_bad_draft_policy_names_file_line_and_key(tmp_path: Any, line: str, message: str) -> None:
    from lab.profile.errors import ProfileError
    from lab.profile.load import parse_profile
    from lab.registry import load_registry

    path = str(tmp_path / "p.toml")
    source = PROFILE.format(policy=line)
    with pytest.raises(ProfileError) as err:
        parse_profile(source, path, load_registry())
    text = str(err.value)
    assert f"p.toml:{source.splitlines().index(line) + 1}:" in text and "[arms[2].draft_policy]" in text and message in text, text


def test_a_draft_policy_needs_a_drafter(tmp_path: Any) -> None:
    from lab.profile.errors import ProfileError
    from lab.profile.load import parse_profile

    text = PROFILE.format(policy="").replace('drafter = "ngram"\nn_max = 4\n\n', 'draft_policy = "grow-shrink"\n\n', 1)
    with pytest.raises(ProfileError, match=r"arms\[1\]\.draft_policy.*give the arm a drafter"):
        parse_profile(text, str(tmp_path / "p.toml"), None)


@pytest.mark.slow
def test_a_real_smollm2_run_with_a_grow_shrink_arm(tmp_path: Any) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    from lab.profile.load import parse_profile
    from lab.registry import load_registry
    from lab.render.report import load_for_report, render_json, render_markdown
    from lab.runner import Runner
    from lab.store import RunStore, load_steps

    registry = load_registry()
    profile = parse_profile(PROFILE.format(policy='draft_policy = "grow-shrink"'), str(tmp_path / "p.toml"),
                            registry)
    assert profile.arm("ngram-gs").draft_policy == draft_policy.GROW_SHRINK
    assert profile.arm("ngram").draft_policy == draft_policy.FIXED
    store = RunStore(profile, tmp_path)
    rows = Runner(profile, registry, store).run()
    assert {r.status.value for r in rows} == {"ok"}, [r.detail for r in rows]
    by_arm = {r.arm: r for r in rows}
    assert by_arm["ngram-gs"].draft_policy == "grow-shrink"
    assert by_arm["ngram"].draft_policy == "fixed" and by_arm["baseline"].draft_policy is None
    # greedy: the policy changes how the text is cut into steps, never the text
    assert by_arm["ngram-gs"].text == by_arm["baseline"].text
    saved = json.loads((store.path / "results.json").read_text())
    assert {r["arm"]: r["draft_policy"] for r in saved["results"]}["ngram-gs"] == "grow-shrink"
    steps = [s for s in load_steps(store.path) if s["arm"] == "ngram-gs"]
    assert steps and all(1 <= s["drafted"] <= 4 for s in steps)

    data = load_for_report(store.path)
    md = render_markdown(data)
    if "no trustworthy probe" in md:
        # a probe the machine's load left unsettled is refused, and with it the replay: the report says so
        assert "no draft-policy replay" in md and "## Draft policy" not in md, md
        return
    section = md.split("## Draft policy", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"^\| ngram \| code \| 4 \| \d+ \(\d+\) \| 1: \d\.\d\d", section, re.M), section
    assert "| ngram-gs | code | grow-shrink | 4 | ngram |" in section, section
    exported = json.loads(render_json(data))["analysis"]["draft_policy"]
    assert [r["arm"] for r in exported["replays"]] == ["ngram"]  # a live policy's steps are not a source
    live = exported["live"][0]
    assert live["policy"] == "grow-shrink" and live["predicted"] > 0 and live["measured"] > 0


def test_a_held_out_prediction_does_not_borrow_a_policy_arms_acceptance() -> None:
    from lab.analysis import holdout

    fixed_steps, policy_steps = _steps(THREE_OF_FOUR, arm="fixed"), _steps(EASY_THEN_HARD, arm="a-gs")
    rows = []
    for arm, steps, rule in (("fixed", fixed_steps, "fixed"), ("a-gs", policy_steps, "grow-shrink"),
                             ("small", _steps([(2, 1)] * 10, arm="small"), "fixed")):
        row = {**_row(steps), "arm": arm, "draft_policy": rule, "draft_config": "{}", "backend": "b", "model": "m",
               "n_max": 2 if arm == "small" else 4}
        rows.append(row)
    steps = fixed_steps + policy_steps
    held = holdout.held_out(rows, steps, "small", "p", PROBE, 2)
    assert held is not None and held.acceptance_from == "fixed"
