"""steps.jsonl records where each step's rejected drafts go (``rejected_at``:
characters into its cell's text, before the target's token that replaced
them), so a saved run can mark them as the live view did."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lab.base.events import REJECTED_AT, Cell, Finished, Status, StatusChanged, StepEvent, TokenEvent
from lab.base.row import ResultRow
from lab.profile.load import parse_profile
from lab.runner import Runner
from lab.store import RunStore, load_run, load_steps
from tests.fakes import BASE_AND_SPEC, WORDS, fake_registry, profile_toml


def _chars(tokens: int) -> int:
    """Characters of the fake engine's first ``tokens`` tokens ("word ")."""
    return sum(len(WORDS[i % len(WORDS)]) + 1 for i in range(tokens))


def test_each_rejecting_step_saves_where_its_drafts_go(tmp_path: Path) -> None:
    registry = fake_registry()
    profile = parse_profile(profile_toml(BASE_AND_SPEC, max_tokens=40, rounds=2, warmup=1), "f.toml", registry)
    store = RunStore(profile, tmp_path / "runs")
    Runner(profile, registry, store).run()
    steps = load_steps(store.path)
    texts = {(r["arm"], r["prompt"], r["round"]): r["text"] for r in load_run(store.path)["results"]}
    cells = {(s["arm"], s["prompt"], s["round"]) for s in steps}
    assert cells == {("spec", "prose", 1), ("spec", "prose", 2)}  # the warmup's steps are not saved
    for cell in cells:
        own = sorted((s for s in steps if (s["arm"], s["prompt"], s["round"]) == cell), key=lambda s: s["index"])
        landed = 1  # the target's first token comes before any step
        for s in own:
            if s["drafted"] > s["accepted"]:
                # after the tokens so far and the drafts it kept, before the target's own
                assert s[REJECTED_AT] == _chars(landed + s["accepted"]), s
                assert s[REJECTED_AT] <= len(texts[cell])
            else:
                assert REJECTED_AT not in s, s
            landed += s["landed"]
        assert any(REJECTED_AT in s for s in own)
    # a compact field: one count on the lines that need it
    raw = (store.path / "steps.jsonl").read_text(encoding="utf-8").splitlines()
    assert all(len(json.dumps({REJECTED_AT: json.loads(line)[REJECTED_AT]})) < 24
               for line in raw if REJECTED_AT in line)


def _step(cell: Cell, index: int, drafted: int, accepted: int) -> StepEvent:
    return StepEvent(cell, index, drafted=drafted, accepted=accepted, landed=accepted + 1,
                     draft_s=0.001, verify_s=0.002, step_s=0.003)


def _tokens(store: RunStore, cell: Cell, drafts: str, own: str) -> None:
    if drafts:
        store(TokenEvent(cell, drafts, (1,) * len(drafts.split()), True))
    store(TokenEvent(cell, own, (2,), False))


def test_a_cell_started_again_counts_its_text_from_the_start(tmp_path: Path) -> None:
    registry = fake_registry()
    profile = parse_profile(profile_toml(BASE_AND_SPEC), "f.toml", registry)
    store = RunStore(profile, tmp_path / "runs")
    cell, other = Cell("spec", "prose", 1), Cell("spec", "code", 1)
    store(StatusChanged(cell, Status.RUNNING))
    store(TokenEvent(cell, "one ", (0,), False))
    _tokens(store, cell, "two three ", "four ")
    store(_step(cell, 0, 3, 2))
    store(TokenEvent(other, "elsewhere ", (5,), False))  # another cell's text counts apart
    _tokens(store, cell, "", "five ")
    store(_step(cell, 1, 3, 0))
    _tokens(store, cell, "six seven eight ", "nine ")
    store(_step(cell, 2, 3, 3))  # nothing rejected
    store(StatusChanged(cell, Status.RUNNING))  # the same cell generated again: its text starts over
    store(TokenEvent(cell, "again ", (0,), False))
    _tokens(store, cell, "", "more ")
    store(_step(cell, 0, 2, 0))
    row = {"arm": "spec", "backend": "fake", "drafter": None, "prompt": "prose", "round": 1, "status": "ok"}
    store(Finished(cell, ResultRow.from_json(row)))
    store.finish()
    saved = [s.get(REJECTED_AT) for s in load_steps(store.path)]
    assert saved == [len("one two three "), len("one two three four "), None, len("again ")]


def test_steps_saved_before_the_field_still_load(tmp_path: Path) -> None:
    lines = [{"arm": "spec", "prompt": "prose", "round": 1, "index": 0, "drafted": 3, "accepted": 1, "landed": 2,
              "draft_s": 0.001, "verify_s": 0.002, "step_s": 0.003, "measured": "draft,verify,step"}]
    (tmp_path / "steps.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    problems: list[str] = []
    steps: list[dict[str, Any]] = load_steps(tmp_path / "steps.jsonl", problems)
    assert steps == lines and not problems
