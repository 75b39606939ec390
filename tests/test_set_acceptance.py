"""Set acceptance (lab.base.set_acceptance): one meaning, checked where a profile
says it, and honoured by every stack that drafts: the lab's own loop in
process (a real draft model on llama.cpp) and llama-server's draft-simple,
draft-mtp and draft-dflash on the project's tiny models. On each, the
acceptance measured per position is within binomial noise of the set rates
and the counts are the engine's own."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lab.analysis.set_acceptance_check import Z_LIMIT, checks
from lab.base.set_acceptance import (
    AcceptanceError,
    SetAcceptance,
    check_rates,
    conditional,
    mean_length,
    per_token_rate,
)
from lab.profile.errors import ProfileError

# -- the meaning --------------------------------------------------------------------------------------


def test_one_per_token_chance_is_geometric_rates() -> None:
    assert SetAcceptance("rate", 0.5).rates(3) == (0.5, 0.25, 0.125)
    assert conditional((0.5, 0.25, 0.125)) == (0.5, 0.5, 0.5)


def test_rates_are_cut_to_n_max_and_refused_when_short() -> None:
    s = SetAcceptance("rates", (0.9, 0.8, 0.6))
    assert s.rates(2) == (0.9, 0.8)
    with pytest.raises(AcceptanceError, match="give one rate per position"):
        s.rates(4)


@pytest.mark.parametrize("length,n_max", [(1.0, 4), (2.2, 2), (3.5, 7), (3.9, 4), (5.0, 4)])
def test_a_mean_length_lands_that_many_tokens_per_step(length: float, n_max: int) -> None:
    rates = SetAcceptance("mean_length", length).rates(n_max)
    assert mean_length(rates) == pytest.approx(length, abs=1e-9)
    # one chance per token: the conditionals are equal
    c = [x for x in conditional(rates) if x > 0]
    assert max(c, default=0) - min(c, default=0) < 1e-9


def test_impossible_mean_lengths_are_refused() -> None:
    with pytest.raises(AcceptanceError, match=r"in \[1, 4\]"):
        per_token_rate(4.5, 3)
    with pytest.raises(AcceptanceError):
        per_token_rate(float("nan"), 3)


def test_rates_never_grow() -> None:
    assert check_rates([0.9, 0.8]) is None
    assert "never grow" in (check_rates([0.8, 0.9]) or "")
    assert "not a number in [0, 1]" in (check_rates([1.2]) or "")


# -- the loop, without an engine ----------------------------------------------------------------------


class CountingTarget:
    """Enough of lab.kit.speculative.Target for accept_set: every row picks 0."""

    def __init__(self) -> None:
        self.picks = 0

    def pick(self, row: int) -> int:
        self.picks += 1
        return 0


def test_accept_set_keeps_each_position_at_its_conditional_chance() -> None:
    from lab.kit.speculative import accept_set

    rates = (0.9, 0.6, 0.3, 0.1)
    chances = conditional(rates)
    rng = np.random.default_rng(7)
    target = CountingTarget()
    n = 20000
    reached = [0] * 4
    kept = [0] * 4
    for _ in range(n):
        # the draft agrees with the target everywhere: agreement must not matter
        accepted, correction = accept_set(target, [0, 0, 0, 0], chances, rng)
        for i in range(min(accepted + 1, 4)):
            reached[i] += 1
            kept[i] += i < accepted
        assert correction == 0
    for i, p in enumerate(chances):
        se = math.sqrt(p * (1 - p) / reached[i])
        assert abs(kept[i] / reached[i] - p) < 4 * se, (i, kept[i], reached[i], p)
    # every row up to the first rejection is picked, as a verify by agreement does
    assert target.picks == sum(reached) + kept[3]


# -- the profile key ----------------------------------------------------------------------------------

ARMS = """
[[arms]]
name = "base"
backend = "llamacpp"
model = "tiny:llama"
[[arms]]
name = "set"
backend = "llamacpp"
model = "tiny:llama"
drafter = "draft-model"
n_max = {n_max}
drafter_options = {{ model = "tiny:llama" }}
acceptance = {acceptance}
"""


def _profile(tmp_path: Path, acceptance: str, n_max: int = 3, extra: str = "") -> Any:
    from lab.profile.load import parse_profile
    from lab.registry import load_registry

    text = ("[run]\nmax_tokens = 8\nrounds = 1\nwarmup = 0\nprobe = false\n"
            "[[prompts]]\nname = \"p\"\ntext = \"hi\"\n" + ARMS.format(n_max=n_max, acceptance=acceptance) + extra)
    path = tmp_path / "p.toml"
    path.write_text(text)
    return parse_profile(text, str(path), load_registry())


def test_a_sweep_makes_one_arm_per_setting(tmp_path: Path) -> None:
    p = _profile(tmp_path, '[0.5, { mean_length = 2.5 }, { rates = [0.9, 0.5, 0.1] }]')
    arms = {a.name: a for a in p.arms}
    assert set(arms) == {"base", "set-acceptance0.5", "set-acceptanceL2.5", "set-acceptancer0.9_0.5_0.1"}
    assert arms["set-acceptance0.5"].set_rates == (0.5, 0.25, 0.125)
    assert mean_length(arms["set-acceptanceL2.5"].set_rates or ()) == pytest.approx(2.5)
    assert arms["base"].set_rates is None and arms["base"].is_baseline
    assert arms["set-acceptance0.5"].baseline == "base"


@pytest.mark.parametrize("acceptance,n_max,words", [
    ("1.5", 3, "a chance in [0, 1]"),
    ("{ rates = [0.5, 0.7, 0.1] }", 3, "never grow"),
    ("{ rates = [0.9] }", 3, "one rate per position"),
    ("{ mean_length = 5.0 }", 3, "not possible drafting 3"),
    ("{ mean_length = 2, rates = [0.5] }", 3, "exactly one of"),
    ('"often"', 3, "expected a chance"),
    ("[]", 3, "sweeps nothing"),
])
def test_bad_settings_name_file_line_and_key(tmp_path: Path, acceptance: str, n_max: int, words: str) -> None:
    with pytest.raises(ProfileError) as err:
        _profile(tmp_path, acceptance, n_max)
    text = str(err.value)
    assert words in text and "acceptance" in text and "p.toml" in text
    lines = (tmp_path / "p.toml").read_text().splitlines()
    line = 1 + next(i for i, t in enumerate(lines) if t.startswith("acceptance ="))
    assert f"p.toml:{line}:" in text, text  # the arm's acceptance line


def test_a_baseline_or_an_attached_server_cannot_set_acceptance(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="arms that draft"):
        _profile(tmp_path, "0.5", extra='[[arms]]\nname = "b2"\nbackend = "llamacpp"\nmodel = "tiny:llama"\nacceptance = 0.5\n')
    attached = ('[[arms]]\nname = "u"\nbackend = "llamacpp-server"\nurl = "http://127.0.0.1:9"\nn_max = 3\n'
                'options = { spec_type = "ngram-mod" }\nacceptance = 0.5\n')
    with pytest.raises(ProfileError, match="cannot set acceptance"):
        _profile(tmp_path, "0.5", extra=attached)


# -- real engines -------------------------------------------------------------------------------------


def _run(tmp_path: Path, arms: str, max_tokens: int, prompts: int = 2) -> tuple[list[Any], Path]:
    from lab.profile.load import parse_profile
    from lab.registry import load_registry
    from lab.render.report import ReportWriter
    from lab.runner import Runner
    from lab.store import RunStore

    texts = ["Write about lighthouses and the sea.", "Write a Python function that sorts a list."]
    text = (f"[run]\nmax_tokens = {max_tokens}\nrounds = 1\nwarmup = 0\nprobe = false\nthreads = 1\nn_ctx = 1024\n"
            + "".join(f'[[prompts]]\nname = "p{i}"\ntext = "{t}"\n' for i, t in enumerate(texts[:prompts])) + arms)
    registry = load_registry()
    profile = parse_profile(text, str(tmp_path / "p.toml"), registry)
    store = RunStore(profile, tmp_path / "runs")
    rows = Runner(profile, registry, store, [ReportWriter()]).run()
    return rows, store.path


def _steps(run_dir: Path) -> list[dict[str, Any]]:
    import json

    return [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines() if line.strip()]


def _honoured(rows: list[Any], run_dir: Path, arm: str, at_most: bool = False) -> None:
    """The arm's measured acceptance per position is within binomial noise of
    its set rates, and the report says so. ``at_most``: only not above them
    (llama-server refuses a drafted end-of-generation token whatever the
    draw, and a random draft proposes those)."""
    found = {c.arm: c for c in checks(rows, _steps(run_dir))}
    c = found[arm]
    assert c.positions[0].reached > 50, c
    seen = [(p.position, p.set_rate, p.accepted, p.reached, p.z) for p in c.positions]
    report = (run_dir / "report.md").read_text()
    assert "Set acceptance:" in report and f"- {arm}:" in report
    if at_most:
        assert all(p.z is None or p.z <= Z_LIMIT for p in c.positions), seen
        assert c.honoured or c.below, seen
        return
    assert c.honoured, seen
    assert c.worst_z is not None and c.worst_z <= Z_LIMIT
    assert "within binomial noise" in report


@pytest.mark.engine
def test_in_process_draft_model_at_set_acceptance(tmp_path: Path) -> None:
    arms = ARMS.format(n_max=4, acceptance="0.7")
    rows, run_dir = _run(tmp_path, arms, max_tokens=160)
    assert all(r["status"] == "ok" for r in rows), [(r["arm"], r["detail"][:300]) for r in rows]
    spec = [r for r in rows if r["arm"] == "set"]
    # the draft is the target itself: by agreement it would keep everything
    assert all(r["acceptance_rate"] < 0.9 for r in spec)
    assert all(r["identical_to_baseline"] is None for r in spec)
    assert all(r["set_acceptance"]["rates"][0] == 0.7 for r in spec)
    assert all("acceptance set" in r["verdict"] for r in spec)
    _honoured(rows, run_dir, "set")


SERVER_ARMS = """
[[arms]]
name = "llama-base"
backend = "llamacpp-server"
model = "tiny:llama"
[[arms]]
name = "simple"
backend = "llamacpp-server"
model = "tiny:llama"
n_max = 4
options = {{ spec_type = "draft-simple", draft_model = "tiny:llama" }}
acceptance = 0.7
[[arms]]
name = "dflash"
backend = "llamacpp-dflash"
model = "tiny:llama"
n_max = 3
options = {{ draft_model = "tiny:llama-dflash" }}
acceptance = {{ rates = [0.8, 0.6, 0.4] }}
[[arms]]
name = "glm-base"
backend = "llamacpp-server"
model = "tiny:glm4moe-mtp"
[[arms]]
name = "mtp"
backend = "llamacpp-mtp"
model = "tiny:glm4moe-mtp"
n_max = 2
acceptance = {{ mean_length = 2.2 }}
"""


@pytest.mark.engine
def test_llama_server_spec_types_at_set_acceptance(tmp_path: Path) -> None:
    from lab_llamacpp_server.binary import ServerNotFound, server_info

    try:
        server_info()
    except ServerNotFound as exc:
        pytest.skip(f"llama-server not found: {exc} (bash scripts/setup.sh all,test)")
    rows, run_dir = _run(tmp_path, SERVER_ARMS.format(), max_tokens=160)
    assert all(r["status"] == "ok" for r in rows), [(r["arm"], r["detail"][:300]) for r in rows]
    for arm in ("simple", "dflash", "mtp"):
        spec = [r for r in rows if r["arm"] == arm]
        assert spec and all(r["steps"] for r in spec), arm
        # the counts are the server's own
        for r in spec:
            rep = r["engine_report"]
            assert rep.get("counts_match_server") is True, (arm, rep.get("checks"))
        assert all(r["identical_to_baseline"] is None for r in spec)
        # the tiny DFlash draft is random and often proposes an end-of-generation token
        _honoured(rows, run_dir, arm, at_most=arm == "dflash")
    log = (run_dir / "llama-server-simple.log").read_text(errors="replace")
    assert "synthetic acceptance" in log


def test_every_cell_draws_its_own_sequence() -> None:
    from lab.base.set_acceptance import draw_seed

    seeds = {draw_seed(0, p, r) for p in ("prose", "code") for r in (1, 2)}
    assert len(seeds) == 4 and draw_seed(0, "prose", 1) == draw_seed(0, "prose", 1)
    assert draw_seed(1, "prose", 1) != draw_seed(0, "prose", 1)


MLX_ARMS = """
[[arms]]
name = "mlx-base"
backend = "mlx"
model = "tiny:qwen3"
[[arms]]
name = "mlx-draft"
backend = "mlx"
model = "tiny:qwen3"
drafter = "draft-model"
n_max = 3
drafter_options = { model = "tiny:qwen3-draft" }
acceptance = 0.6
[[arms]]
name = "mlx-dflash"
backend = "mlx-dflash"
model = "tiny:qwen3"
n_max = 3
options = { draft = "tiny:qwen3-dflash" }
acceptance = { rates = [0.8, 0.5, 0.3] }
"""


@pytest.mark.engine
def test_mlx_loops_at_set_acceptance(tmp_path: Path) -> None:
    pytest.importorskip("mlx.core", reason="MLX is not installed here (bash scripts/setup.sh all,test)")
    rows, run_dir = _run(tmp_path, MLX_ARMS, max_tokens=120)
    assert all(r["status"] == "ok" for r in rows), [(r["arm"], r["detail"][:300]) for r in rows]
    for arm in ("mlx-draft", "mlx-dflash"):
        spec = [r for r in rows if r["arm"] == arm]
        assert all(r["identical_to_baseline"] is None and r["set_acceptance"] for r in spec)
        _honoured(rows, run_dir, arm)


# -- one setting per prompt ---------------------------------------------------------------------------

TWO_PROMPTS = '[[prompts]]\nname = "q"\ntext = "more"\n'


def test_a_table_per_prompt_makes_an_arm_per_prompt(tmp_path: Path) -> None:
    p = _profile(tmp_path, '{ p = 0.6, q = { mean_length = 2.5 } }', extra=TWO_PROMPTS)
    arms = {a.name: a for a in p.arms}
    assert set(arms) == {"base", "set-p", "set-q"}
    assert arms["set-p"].acceptance.prompt == "p"
    assert arms["set-p"].set_rates == pytest.approx((0.6, 0.36, 0.216))
    assert mean_length(arms["set-q"].set_rates or ()) == pytest.approx(2.5)
    assert arms["set-q"].baseline == "base"


def test_an_arm_set_for_one_prompt_runs_that_prompt_only(tmp_path: Path) -> None:
    from lab.registry import load_registry
    from lab.runner import Runner

    p = _profile(tmp_path, '{ p = 0.6, q = 0.9 }', extra=TWO_PROMPTS)
    runner = Runner(p, load_registry())
    cells = {a.name: [(c.prompt, c.round) for c in runner._cells(a)] for a in p.arms}
    assert cells == {"base": [("p", 1), ("q", 1)], "set-p": [("p", 1)], "set-q": [("q", 1)]}


@pytest.mark.parametrize("acceptance,words,where", [
    ('{ p = 0.6, r = 0.5, q = 0.5 }', "no prompt named 'r'", "acceptance.r"),
    ('{ p = 0.6 }', "not for 'q'", "acceptance"),
    ('[{ p = 0.6, q = 0.5 }]', "cannot be swept", "acceptance[0]"),
    ('{ p = [0.5, 0.6], q = 0.5 }', "not a sweep", "acceptance.p"),
    ('{ p = 1.5, q = 0.5 }', "a chance in [0, 1]", "acceptance.p"),
    ('{}', "an empty table", "acceptance"),
])
def test_bad_settings_per_prompt_name_file_line_and_key(tmp_path: Path, acceptance: str, words: str, where: str) -> None:
    with pytest.raises(ProfileError) as err:
        _profile(tmp_path, acceptance, extra=TWO_PROMPTS)
    text = str(err.value)
    assert words in text and where in text and "p.toml" in text, text
    lines = (tmp_path / "p.toml").read_text().splitlines()
    line = 1 + next(i for i, t in enumerate(lines) if t.startswith("acceptance ="))
    assert f"p.toml:{line}:" in text, text
