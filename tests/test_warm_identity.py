"""Greedy identity of warm rounds: round 1 of a warm arm is its cold one
and is held to its baseline; its later rounds met what the earlier ones left
and are held to that cold first round of the same prompt, and the row and
report.md say so. Runner logic on the scripted fake backend (tests.fakes),
whose ``texts`` make an engine's output change from one generation to the
next as a stateful engine's can."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lab.profile.load import parse_profile
from lab.render.report import write_report
from lab.runner import Runner
from lab.store import RunStore
from tests.fakes import FakeBackend, fake_registry, profile_toml

BASE = "a b c d e f g h"
# round 1 leaves the baseline at "X"; round 2 repeats round 1; round 3 leaves round 1 at "Y"
SPEC_ROUNDS = ["a b X d e f g h", "a b X d e f g h", "a b X d Y f g h"]


def _arms(round_state: str = "none") -> str:
    texts = ", ".join(f'"{t}"' for t in SPEC_ROUNDS)
    return (
        f'[[arms]]\nname = "base"\nbackend = "fake"\noptions = {{ virtual_clock = true, text = "{BASE}" }}\n\n'
        f'[[arms]]\nname = "spec"\nbackend = "fake"\nn_max = 2\n'
        f'options = {{ speculative = true, virtual_clock = true, texts = [{texts}], round_state = "{round_state}" }}\n'
    )


def _run(tmp_path: Path, warm: bool, warmup: int = 0, round_state: str = "none",
         spec_texts: list[str] | None = None) -> tuple[list[dict[str, Any]], Path]:
    arms = _arms(round_state)
    if spec_texts is not None:
        arms = arms.replace(", ".join(f'"{t}"' for t in SPEC_ROUNDS), ", ".join(f'"{t}"' for t in spec_texts))
    text = profile_toml(arms, max_tokens=8, rounds=3, warmup=warmup)
    text = text.replace("[run]\n", f"[run]\nwarm_rounds = {str(warm).lower()}\n", 1)
    registry = fake_registry()
    profile = parse_profile(text, str(tmp_path / "p.toml"), registry)
    store = RunStore(profile, tmp_path / "runs")
    rows = [r.to_json() for r in Runner(profile, registry, store, []).run()]
    return rows, store.path


def _spec(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    spec = sorted((r for r in rows if r["arm"] == "spec"), key=lambda r: r["round"])
    assert [r["status"] for r in spec] == ["ok"] * 3, [r["detail"] for r in spec]
    return spec


def test_warm_rounds_after_the_first_are_held_to_the_cold_first_round(tmp_path: Path) -> None:
    rows, run_dir = _run(tmp_path, warm=True)
    r1, r2, r3 = _spec(rows)
    assert r1["text"].split() == SPEC_ROUNDS[0].split()
    # round 1 against its baseline: it leaves it at the "X"
    assert (r1["identity_reference"], r1["identical_to_baseline"]) == ("baseline", False)
    assert r1["first_divergence_char"] == BASE.index("c")
    # round 2 repeats round 1: identical to what it is held to, though not to the baseline
    assert (r2["identity_reference"], r2["identical_to_baseline"], r2["first_divergence_char"]) == \
        ("cold first round", True, None)
    # round 3 leaves round 1 at the "Y", later than it leaves the baseline
    assert (r3["identity_reference"], r3["identical_to_baseline"]) == ("cold first round", False)
    assert r3["first_divergence_char"] == SPEC_ROUNDS[0].index("e")
    # the baselines are not compared with anything
    assert all(r["identity_reference"] is None for r in rows if r["arm"] == "base")
    report = write_report(run_dir).read_text(encoding="utf-8")
    assert "- spec / prose r3 (against its cold first round): char 8" in report
    assert "[cold first round: " in report
    assert "- spec / prose r1: char 4" in report and "[baseline: " in report
    assert "later rounds against its cold first round" in report


def test_cold_rounds_are_each_held_to_the_baseline(tmp_path: Path) -> None:
    rows, run_dir = _run(tmp_path, warm=False)
    spec = _spec(rows)
    assert [r["identity_reference"] for r in spec] == ["baseline"] * 3
    assert [r["first_divergence_char"] for r in spec] == [BASE.index("c")] * 3
    report = write_report(run_dir).read_text(encoding="utf-8")
    assert "cold first round" not in report


def test_warm_rounds_identical_to_their_first_read_so(tmp_path: Path) -> None:
    rows, run_dir = _run(tmp_path, warm=True, spec_texts=[BASE])
    spec = _spec(rows)
    assert [r["identical_to_baseline"] for r in spec] == [True] * 3
    assert [r["identity_reference"] for r in spec] == ["baseline", "cold first round", "cold first round"]
    report = write_report(run_dir).read_text(encoding="utf-8")
    assert "round 1 to its baseline, a later warm round against its cold first round" in report


def test_warm_rounds_reset_once_after_warmup_so_round_one_is_cold(tmp_path: Path) -> None:
    FakeBackend.instances.clear()
    _run(tmp_path / "warm", warm=True, warmup=1, round_state="reset")
    spec = [b for b in FakeBackend.instances if b.arm.name == "spec"]
    # one warmup, then the reset before round 1 and none between the warm rounds
    assert len(spec) == 1 and spec[0].resets == 1
    FakeBackend.instances.clear()
    _run(tmp_path / "cold", warm=False, warmup=1, round_state="reset")
    spec = [b for b in FakeBackend.instances if b.arm.name == "spec"]
    assert len(spec) == 1 and spec[0].resets == 3
