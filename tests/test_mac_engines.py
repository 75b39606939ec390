"""The engines a Mac user runs (mlx-lm, z-lab's dflash, dflash-mlx), each
against its real engine on the project's tiny MLX models through the real
runner: rows ok and drafting, the lab's counts equal to what the engine
itself reports, greedy tokens held to the lab's own loop on the same files,
the report's engines section, and ``lab check`` refusing an arm whose
engine is not installed with the command that installs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping

import pytest

from lab.base.events import Finished, RunEvent, StepEvent
from lab.profile.load import parse_profile
from lab.registry import Registry, load_registry
from lab.render import engines
from lab.runner import Runner
from lab.store import profile_summary

pytestmark = pytest.mark.engine

HEAD = """
[profile]
name = "mac-engines"

[run]
max_tokens = 24
rounds = 1
warmup = 0
n_ctx = 512
chat_template = true
ignore_eos = true
temperature = 0.0

[[prompts]]
name = "p"
text = "Write a short essay about lighthouses."
"""

ARMS = {
    "lab-base": 'backend = "mlx"\nmodel = "tiny:qwen3"',
    "lab-self": 'backend = "mlx"\nmodel = "tiny:qwen3"\ndrafter = "draft-model"\nn_max = 3\n'
                'drafter_options = { model = "tiny:qwen3" }',
    "lab-dflash": 'backend = "mlx-dflash"\nmodel = "tiny:qwen3"\nn_max = 3\n'
                  'options = { draft = "tiny:qwen3-dflash", timing = "fused" }',
    "mlx-lm": 'backend = "mlx-lm"\nmodel = "tiny:qwen3"',
    "mlx-lm-self": 'backend = "mlx-lm"\nmodel = "tiny:qwen3"\nn_max = 3\noptions = { draft_model = "tiny:qwen3" }',
    "zlab": 'backend = "zlab-dflash"\nmodel = "tiny:qwen3"\nn_max = 3\noptions = { draft = "tiny:qwen3-dflash" }',
    "dflash-mlx": 'backend = "dflash-mlx"\nmodel = "tiny:qwen3"\nn_max = 3\n'
                  'options = { draft = "tiny:qwen3-dflash", verify_mode = "dflash" }',
    "dflash-mlx-tree": 'backend = "dflash-mlx"\nmodel = "tiny:qwen3"\nn_max = 3\n'
                       'options = { draft = "tiny:qwen3-dflash", verify_mode = "ddtree" }',
    "dflash-mlx-pipelined": 'backend = "dflash-mlx"\nmodel = "tiny:qwen3"\nn_max = 3\n'
                            'options = { draft = "tiny:qwen3-dflash", verify_mode = "dflash", cycle_events = false }',
}
ENGINES = {"mlx-lm": "mlx_lm", "zlab-dflash": "dflash", "dflash-mlx": "dflash_mlx"}


def _profile(names: list[str]) -> str:
    return HEAD + "".join(f'\n[[arms]]\nname = "{n}"\n{ARMS[n]}\n' for n in names)


@pytest.fixture(scope="module")
def registry() -> Registry:
    return load_registry()


@pytest.fixture(scope="module")
def ran(registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    for module in ENGINES.values():
        pytest.importorskip(module, reason=f"{module} is not installed (docs/mac-engines.md says how)")
    text = _profile(list(ARMS))
    path = tmp_path_factory.mktemp("engines") / "p.toml"
    path.write_text(text)
    events: list[RunEvent] = []
    profile = parse_profile(text, str(path), registry)
    Runner(profile, registry, listeners=[events.append]).run()
    rows = {e.cell.arm: e.result for e in events if isinstance(e, Finished) and e.cell.round >= 1}
    steps: dict[str, list[StepEvent]] = {}
    for e in events:
        if isinstance(e, StepEvent) and e.cell.round >= 1:
            steps.setdefault(e.cell.arm, []).append(e)
    return {"rows": rows, "steps": steps, "profile": profile}


def _report(row: Mapping[str, Any]) -> Mapping[str, Any]:
    return row["engine_report"]


@pytest.mark.parametrize("arm", ["mlx-lm", "mlx-lm-self", "zlab", "dflash-mlx", "dflash-mlx-tree", "dflash-mlx-pipelined"])
def test_rows_are_ok_and_greedy_tokens_match_the_labs_loop(ran: dict[str, Any], arm: str) -> None:
    rows = ran["rows"]
    assert rows[arm]["status"] == "ok", rows[arm].get("detail")
    assert rows[arm]["n_tokens"] == 24
    assert _report(rows[arm])["output_ids"] == _report(rows["lab-base"])["output_ids"]
    # the same tokens through the same detokenizer (mlx-lm's): the same text, its held-back tail included
    assert rows[arm]["text"] == rows["mlx-lm"]["text"]


@pytest.mark.parametrize("arm", ["mlx-lm-self", "zlab", "dflash-mlx", "dflash-mlx-tree", "dflash-mlx-pipelined"])
def test_engine_arms_draft(ran: dict[str, Any], arm: str) -> None:
    assert ran["rows"][arm]["drafted"] > 0
    assert ran["rows"][arm]["steps"] == len(ran["steps"][arm])
    # a dflash-mlx cycle that landed nothing has no clock of its own without the trace
    assert all(s.step_s > 0 for s in ran["steps"][arm] if s.landed or arm != "dflash-mlx-pipelined")


def test_mlx_lm_counts_equal_its_from_draft_flags(ran: dict[str, Any]) -> None:
    row = ran["rows"]["mlx-lm-self"]
    assert row["accepted"] == _report(row)["from_draft_tokens"] > 0
    # the target drafting for itself: every draft kept, in mlx-lm's loop as in the lab's
    assert row["accepted"] == row["drafted"]
    assert ran["rows"]["lab-self"]["accepted"] == ran["rows"]["lab-self"]["drafted"] > 0
    assert sum(s.landed for s in ran["steps"]["mlx-lm-self"]) == row["n_tokens"]


def test_zlab_counts_equal_its_per_step_yields(ran: dict[str, Any]) -> None:
    row = ran["rows"]["zlab"]
    yields = _report(row)["engine_yields"]
    # the first yield is prompt processing's token; each later one is a step's landed tokens
    assert [s.landed for s in ran["steps"]["zlab"]] == yields[1:]
    assert sum(yields) == row["n_tokens"]


@pytest.mark.parametrize("arm", ["dflash-mlx", "dflash-mlx-tree", "dflash-mlx-pipelined"])
def test_dflash_mlx_counts_equal_its_summary(ran: dict[str, Any], arm: str) -> None:
    row, steps = ran["rows"][arm], ran["steps"][arm]
    report = _report(row)
    assert [s.accepted for s in steps] == report["engine_acceptance_history"]
    assert row["accepted"] == report["engine_accepted_from_draft"]
    assert row["steps"] == report["engine_cycles"]
    assert report["engine_generation_tokens"] == row["n_tokens"]


def test_dflash_mlx_reports_draft_and_verify_seconds_only_with_its_cycle_trace(ran: dict[str, Any]) -> None:
    traced, pipelined = ran["steps"]["dflash-mlx"], ran["steps"]["dflash-mlx-pipelined"]
    assert all(s.draft_s is not None and s.verify_s is not None for s in traced)
    assert {s.measured for s in traced} == {"step=engine;draft=engine;verify=engine"}
    assert all(s.draft_s is None and s.verify_s is None for s in pipelined)
    assert ran["rows"]["dflash-mlx-pipelined"]["draft_s"] is None


def test_zlab_and_mlx_lm_report_no_draft_or_verify_seconds(ran: dict[str, Any]) -> None:
    for arm in ("zlab", "mlx-lm-self"):
        assert all(s.draft_s is None and s.verify_s is None and s.measured == "step=client-clock;draft=none;verify=none"
                   for s in ran["steps"][arm])


def test_the_report_sets_each_engine_beside_the_labs_loop(ran: dict[str, Any]) -> None:
    profile = ran["profile"]
    results = list(ran["rows"].values())
    summary = profile_summary(profile)
    data = {"profile": summary, "results": results, "steps": [s.record() for arm in ran["steps"].values() for s in arm]}
    found = {(p.engine_arm, p.lab_arm) for p in engines.pairs(summary, results)}
    assert found == {("mlx-lm", "lab-base"), ("mlx-lm-self", "lab-self"), ("zlab", "lab-dflash"),
                     ("dflash-mlx", "lab-dflash"), ("dflash-mlx-tree", "lab-dflash"), ("dflash-mlx-pipelined", "lab-dflash")}
    assert "tree drafting (ddtree)" in "\n".join(engines.markdown_lines(data))
    text = "\n".join(engines.markdown_lines(data))
    assert "| zlab (zlab-dflash) | lab-dflash | p | 1 | identical (24)" in text
    assert "lab-self over mlx-lm-self: min" in text
    # the target drafting for itself keeps every draft at every position, in both loops
    line = next(x for x in text.splitlines() if x.startswith("| mlx-lm-self (mlx-lm) | lab-self | p | 1 | identical (24)"))
    assert "| 1.00/1.00, 1.00/1.00, 1.00/1.00 |" in line


# `lab check` in an interpreter that cannot import the engine's package, as
# one without it installed sees it
_CHECK = "import sys; sys.modules[sys.argv[1]] = None; from lab.cli import main; sys.exit(main(['check', sys.argv[2]]))"


@pytest.mark.parametrize(("arm", "module", "install"), [
    ("dflash-mlx", "dflash_mlx", "pip install dflash-mlx==0.1.8"),
    ("zlab", "dflash", "pip install --no-deps dflash==0.1.0"),
    ("mlx-lm", "mlx_lm", "pip install mlx-lm"),
])
def test_lab_check_refuses_an_engine_that_is_not_installed(tmp_path: Path, arm: str, module: str, install: str) -> None:
    path = tmp_path / "p.toml"
    path.write_text(_profile(["lab-base", arm]))
    done = subprocess.run([sys.executable, "-c", _CHECK, module, str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert f"arm {arm} " in done.stderr and install in done.stderr, done.stderr
    ok = subprocess.run([sys.executable, "-c", _CHECK, "no_such_module_here", str(path)], capture_output=True, text=True,
                        timeout=300)
    assert ok.returncode == 0, ok.stderr


def test_dflash_mlx_without_its_cycle_trace_needs_a_fixed_block(tmp_path: Path) -> None:
    from lab.profile.load import ProfileError, check_profile

    path = tmp_path / "p.toml"
    path.write_text(HEAD + '\n[[arms]]\nname = "adaptive"\nbackend = "dflash-mlx"\nmodel = "tiny:qwen3"\nn_max = 3\n'
                    'options = { draft = "tiny:qwen3-dflash", cycle_events = false }\n')
    with pytest.raises(ProfileError, match="cycle_events = false with verify_mode 'adaptive'"):
        check_profile(path, load_registry())


def test_dflash_mlx_drafted_counts_agree_with_and_without_its_trace(ran: dict[str, Any]) -> None:
    # the same fixed block and greedy tokens: what the pipelined arm derives from
    # the block, the trace reports per cycle
    traced, pipelined = ran["steps"]["dflash-mlx"], ran["steps"]["dflash-mlx-pipelined"]
    assert [s.accepted for s in traced] == [s.accepted for s in pipelined]
    assert [(s.drafted, s.landed) for s in traced] == [(s.drafted, s.landed) for s in pipelined]
