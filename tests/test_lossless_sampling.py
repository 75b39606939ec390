"""The lossless check at temperature > 0: its statistics on synthetic
samples, then on the real embedded SmolLM2 through llama.cpp, where the
built-in drafters must pass and a broken acceptance rule, or a drafter that
misreports its proposal distribution, must fail."""

from __future__ import annotations

import argparse
import io
from typing import Any, Callable, Sequence

import numpy as np
import pytest

from lab.cli.lossless import add_arguments, main
from lab.lossless import (
    DrafterSpec,
    LosslessReport,
    holm,
    min_detectable_tv,
    permutation_test,
    permutations_needed,
    run_lossless_check,
    tv_distance,
)

# -- statistics ------------------------------------------------------------------


def zipf(k: int, s: float = 1.1) -> np.ndarray:
    w = 1.0 / np.arange(1, k + 1) ** s
    out: np.ndarray = w / w.sum()
    return out


def test_holm_adjusts_step_down() -> None:
    # Sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1, then kept monotone.
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])


def test_permutation_p_values_hold_their_level_on_sparse_tables() -> None:
    # The same sparse distribution on both sides: most of 200 tokens are
    # seen once or never, where the asymptotic chi-square law misleads.
    rng = np.random.default_rng(7)
    w = zipf(200)
    ps = np.array([permutation_test(rng.choice(200, 150, p=w), rng.choice(200, 150, p=w), 600, rng)[1]
                   for _ in range(300)])
    assert ps.min() > 0
    # Binomial(300, 0.05) lies in [5, 26] with probability > 0.999.
    assert 5 <= int((ps <= 0.05).sum()) <= 26


def test_permutation_test_finds_a_moved_mass() -> None:
    rng = np.random.default_rng(3)
    w = zipf(50)
    moved = w.copy()
    moved[0] -= 0.2
    moved[5] += 0.2
    a, b = rng.choice(50, 150, p=w), rng.choice(50, 150, p=moved)
    _, p, chance = permutation_test(a, b, 2000, rng)
    assert p < 0.001
    # Sampling noise adds to the true 0.2 on a sparse table: read the
    # observed distance against the one the same samples show by chance.
    tv = tv_distance(a, b)
    assert 0.15 < tv < 0.5
    assert 0.05 < tv - chance < 0.35


def test_quoted_detectable_distance_matches_simulated_power() -> None:
    rng = np.random.default_rng(11)
    n, level = 150, 0.01 / 12
    d = min_detectable_tv(n, n, level)
    assert 0.15 < d < 0.35
    assert min_detectable_tv(4 * n, 4 * n, level) == pytest.approx(d / 2)

    def power(delta: float) -> float:
        hits = 0
        for _ in range(80):
            a = rng.choice(2, n, p=[0.5, 0.5])
            b = rng.choice(2, n, p=[0.5 + delta, 0.5 - delta])
            hits += permutation_test(a, b, 1500, rng)[1] <= level
        return hits / 80

    assert power(d) >= 0.6
    assert power(d / 3) <= 0.2


def test_permutations_leave_room_under_holms_first_threshold() -> None:
    b = permutations_needed(60, 0.01, None)
    assert 1 / (b + 1) < 0.01 / 60 / 2
    assert permutations_needed(1, 0.01, 5000) == 5000


def test_drafter_spec_parses_options_with_colons_in_values() -> None:
    spec = DrafterSpec.parse("draft-model:model=embedded:smollm2-q4_0,threads=2")
    assert spec == DrafterSpec("draft-model", {"model": "embedded:smollm2-q4_0", "threads": "2"})
    assert DrafterSpec.parse("ngram") == DrafterSpec("ngram")
    with pytest.raises(ValueError):
        DrafterSpec.parse("ngram:max_ngram")


# -- on the real engine ------------------------------------------------------------

# Sized for CI on two cores: every continuation processes its prompt anew,
# so the cost is arms x contexts x samples x (prompt + tokens) decodes. One
# thread: the distributions do not depend on it, and a shared machine runs
# one busy thread better than two that wait for each other.
SAMPLES = 80
CONTEXTS = [
    ("story", "Once upon a time, in a small village by the sea, there lived"),
    ("days", "Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday, Monday, Tuesday,"),
]
SMALL: dict[str, Any] = {"contexts": CONTEXTS[:1], "tokens": 4, "n_max": 3, "threads": 1, "temperature": 0.8}


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def verdict(report: LosslessReport, drafter: str) -> Any:
    return next(v for v in report.verdicts if v.drafter.split(":")[0] == drafter)


@pytest.fixture(scope="module")
def builtin_report() -> tuple[LosslessReport, str]:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[llamacpp]')")
    out = io.StringIO()
    report = run_lossless_check(
        ["ngram", "oracle", "draft-model:model=embedded:smollm2-q4_0"],
        contexts=CONTEXTS, tokens=4, n_max=3, threads=1, temperature=0.8, samples=SAMPLES, seed=0, out=out,
    )
    return report, out.getvalue()


@pytest.mark.engine
@pytest.mark.slow
@pytest.mark.parametrize("drafter", ["ngram", "oracle", "draft-model"])
def test_builtin_drafters_are_lossless_at_temperature(builtin_report: tuple[LosslessReport, str], drafter: str) -> None:
    report, text = builtin_report
    v = verdict(report, drafter)
    assert v.lossless is True, text
    # The check must have exercised the loop it vouches for: drafts landed
    # and drafts were rejected (the residual draw ran).
    assert v.accepted > 0 and v.drafted > v.accepted, text
    assert any(t.drafted_share > 0 for t in v.tests), text
    assert f"{v.drafter}: lossless: no evidence of a difference (p=" in text
    assert f"n={SAMPLES} per side" in text


def accept_whenever_possible(
    target: Any, drafted: Sequence[int], draft_probs: Sequence[np.ndarray] | None, rng: np.random.Generator
) -> tuple[int, int]:
    """The bug the check exists for: accept a drafted token whenever the
    target gives it any probability, instead of with min(1, p/q)."""
    for i, tok in enumerate(drafted):
        p = target.probs(i).astype(np.float64)
        if p[tok] > 0:
            continue
        return i, int(rng.choice(len(p), p=p / p.sum()))
    p = target.probs(len(drafted)).astype(np.float64)
    return len(drafted), int(rng.choice(len(p), p=p / p.sum()))


@pytest.mark.engine
@pytest.mark.slow
def test_a_broken_acceptance_rule_is_not_lossless(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[llamacpp]')")
    import lab.kit.speculative

    monkeypatch.setattr(lab.kit.speculative, "accept_sampled", accept_whenever_possible)
    out = io.StringIO()
    story = CONTEXTS[0]
    code = main(parse(["--drafter", "oracle", "--samples", "40", "--seed", "1", "--tokens", "4", "--n-max", "3",
                       "--threads", "1", "--context", f"{story[0]}={story[1]}"]), out=out)
    text = out.getvalue()
    assert code == 1, text
    assert "oracle: NOT lossless: position " in text
    assert "<- differs" in text


def misreporting_plugin() -> object:
    """A drafter plugin with the subtle bug: it proposes the oracle's tokens
    with certainty but reports a uniform proposal distribution, so the loop's
    acceptance ratio p/q is inflated and nearly every draft lands."""
    from lab_drafters.oracle import OracleDrafter

    from lab.api import Draft
    from lab.hookspecs import hookimpl

    class MisreportingDrafter(OracleDrafter):
        name = "misreporting"

        def draft(self, context: Sequence[int], k: int) -> Draft:
            tokens = super().draft(context, k).tokens
            uniform = np.full(self.ctx.vocab_size, 1.0 / self.ctx.vocab_size)
            return Draft(tokens, [uniform] * len(tokens))

    class Plugin:
        @staticmethod
        @hookimpl
        def lab_register_drafters(register: Callable[[type], None]) -> None:
            register(MisreportingDrafter)

    return Plugin


@pytest.mark.engine
@pytest.mark.slow
def test_a_drafter_that_misreports_its_proposal_is_not_lossless() -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[llamacpp]')")
    from lab.registry import load_registry

    out = io.StringIO()
    report = run_lossless_check(
        ["misreporting"], samples=40, seed=2, registry=load_registry([misreporting_plugin()]), out=out, **SMALL,
    )
    v = verdict(report, "misreporting")
    assert v.lossless is False, out.getvalue()
    assert report.exit_code == 1
    worst = min(v.tests, key=lambda t: t.p_holm)
    assert worst.p_holm <= report.alpha and worst.tv > report.min_detectable_tv / 2
