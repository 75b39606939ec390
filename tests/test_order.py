"""The order of a run's cells (lab.arms.order): paired slots, groups by
baseline, the arms' turns, and rounds added while paired speedups disagree."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from lab.arms import order
from lab.base.cells import Status
from lab.profile.load import parse_profile
from lab.registry import load_registry


def profile(run: str = "", arms: str = "") -> Any:
    text = ("[run]\nrounds = 2\n" + run + '[[prompts]]\nname = "a"\ntext = "x"\n[[prompts]]\nname = "b"\ntext = "y"\n'
            '[[arms]]\nname = "base"\nbackend = "llamacpp"\nmodel = "embedded:smollm2"\n'
            '[[arms]]\nname = "n1"\nbackend = "llamacpp"\nmodel = "embedded:smollm2"\ndrafter = "ngram"\nn_max = 2\n'
            '[[arms]]\nname = "n2"\nbackend = "llamacpp"\nmodel = "embedded:smollm2"\ndrafter = "ngram"\nn_max = 4\n'
            + arms)
    return parse_profile(text, "p.toml", load_registry())


def cells(slots: list[order.Slot]) -> list[tuple[str, str, int]]:
    return [(s.cell.arm, s.cell.prompt, s.cell.round) for s in slots]


def test_paired_slots_put_each_arm_beside_its_baseline_and_rotate_the_arms() -> None:
    got = cells(order.plan(profile()))
    assert got == [
        ("base", "a", 1), ("n1", "a", 1), ("n2", "a", 1),
        ("base", "a", 2), ("n2", "a", 2), ("n1", "a", 2),
        ("base", "b", 1), ("n1", "b", 1), ("n2", "b", 1),
        ("base", "b", 2), ("n2", "b", 2), ("n1", "b", 2),
    ]


def test_arms_order_runs_each_arm_whole() -> None:
    got = cells(order.plan(profile('order = "arms"\n')))
    assert [c[0] for c in got] == ["base"] * 4 + ["n1"] * 4 + ["n2"] * 4


def test_an_arm_held_to_another_arm_runs_after_it_in_every_slot() -> None:
    extra = ('[[arms]]\nname = "n3"\nbackend = "llamacpp"\nmodel = "embedded:smollm2"\ndrafter = "ngram"\nn_max = 3\n'
             'baseline = "n1"\n')
    got = cells(order.plan(profile(arms=extra)))
    for i in range(0, len(got), 4):
        slot = [c[0] for c in got[i:i + 4]]
        assert slot[0] == "base" and slot.index("n3") > slot.index("n1"), got


def test_groups_split_by_baseline() -> None:
    extra = '[[arms]]\nname = "other"\nbackend = "llamacpp-server"\nmodel = "embedded:smollm2"\n'
    assert [[a.name for a in g] for g in order.groups(profile(arms=extra))] == [["base", "n1", "n2"], ["other"]]


def test_max_rounds_default_and_setting() -> None:
    assert order.max_rounds(profile().run) == 4
    assert order.max_rounds(profile("max_rounds = 2\n").run) == 2
    assert order.max_rounds(profile('order = "arms"\n').run) == 2
    assert order.max_rounds(profile("max_rounds = 7\n").run) == 7


def test_disagreement_in_kind_and_in_spread() -> None:
    assert order.disagreement([1.15, 0.76]) and "pays in one round" in order.disagreement([1.15, 0.76])  # type: ignore[operator]
    assert "spread" in (order.disagreement([0.60, 0.80]) or "")
    assert order.disagreement([0.80, 0.82]) is None
    assert order.disagreement([1.3]) is None


def row(arm: str, prompt: str, rnd: int, speedup: float | None, status: Status = Status.OK) -> Any:
    return SimpleNamespace(arm=arm, prompt=prompt, round=rnd, speedup=speedup, status=status)


def test_extra_slots_add_a_round_only_where_pairs_disagree() -> None:
    p = profile()
    rows = [row("n1", "a", 1, 1.15), row("n1", "a", 2, 0.76), row("n2", "a", 1, 0.5), row("n2", "a", 2, 0.51),
            row("n1", "b", 1, 0.8), row("n1", "b", 2, 0.81), row("n2", "b", 1, 0.5), row("n2", "b", 2, 0.5)]
    slots, why = order.extra_slots(p, rows, 3)
    assert cells(slots) == [("base", "a", 3), ("n1", "a", 3), ("n2", "a", 3)]
    assert "n1 / a pays in one round and loses in another (1.15x, 0.76x)" in why
    agreed = [r for r in rows if r.prompt == "b"]
    assert order.extra_slots(p, agreed, 3) == ([], "")
    # a failed row is no reason to measure more
    failed = [row("n1", "a", 1, 1.15), row("n1", "a", 2, None, Status.ERROR)]
    assert order.extra_slots(p, failed, 3) == ([], "")
