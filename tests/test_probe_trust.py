"""A probe that cannot be physically wrong: the rules a verify-cost curve
keeps (T(1) = 1, rising in w, rising with KV depth, T(w) <= w) checked
within the noise of its own repeats, a breaking curve measured again and
then refused with the reason, a refused curve never priced with, and the
widths that ran kept when a wider one fails. Constructed curves for the
rules; the driver's cycles and re-measure through a scripted backend."""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Sequence

import pytest

from lab.analysis import predict
from lab.analysis.measured_acceptance import PositionAcceptance
from lab.api import Backend, Probing
from lab.base import probe as probes
from lab.base import probe_rules
from lab.hookspecs import hookimpl
from lab.probing import driver
from lab.registry import Registry, load_registry
from tests.fakes import FakeBackend


def _probe(t: dict[int, Sequence[float]], one_s: float = 0.01, deeper: dict[str, Any] | None = None,
           checks: dict[str, Any] | None = None, notes: dict[str, Any] | None = None) -> probes.Probe:
    """A probe whose repeat r has T(w) = t[w][r] over a one-row pass of ``one_s``."""
    widths = tuple(sorted(t))
    n = len(t[widths[0]])
    seconds = tuple(tuple(one_s * t[w][r] for w in widths) for r in range(n))
    extra: dict[str, Any] = dict(notes or {})
    if deeper is not None:
        extra[probes.DEEPER] = deeper
    if checks is not None:
        extra[probe_rules.CHECKS] = checks
    return probes.Probe("llamacpp", "m", "decode", widths, seconds, depth=128 if deeper else None, notes=extra)


def _steady(values: dict[int, float], repeats: int = 5, spread: float = 0.005) -> dict[int, list[float]]:
    """T(w) repeated ``repeats`` times within ±``spread``."""
    return {w: [1.0] * repeats if w == 1 else [v * (1 + spread * ((r % 3) - 1)) for r in range(repeats)]
            for w, v in values.items()}


GOOD = {1: 1.0, 2: 1.4, 3: 1.8, 4: 2.2, 5: 2.6, 7: 3.3, 10: 4.4}


def test_a_curve_that_keeps_every_rule_is_trusted() -> None:
    p = _probe(_steady(GOOD), checks={})
    assert p.trusted and p.trust.reason == ""
    assert "checked: T(1) = 1, rising in w, T(w) <= w" in p.trust_words()


def test_a_curve_above_the_w_line_is_refused_with_its_reason() -> None:
    # the busy probe: T(10) = 20.6 baseline tokens, twice what ten single decodes cost
    p = _probe(_steady(GOOD | {10: 20.6}), checks={})
    assert not p.trusted
    assert "above the T(w) = w line" in p.trust.reason and "T(10) = 20.6" in p.trust.reason
    with pytest.raises(probes.UntrustedProbe, match=r"no trustworthy probe: above the T\(w\) = w line"):
        p.require_trusted()
    assert "no trustworthy probe" in p.render() and "no trustworthy probe" in p.origin_line()


def test_a_curve_falling_in_w_is_refused_with_its_reason() -> None:
    # the other busy probe had T(4) = 2.87 below T(3) = 3.3 (that one above 3 as well)
    p = _probe(_steady({1: 1.0, 2: 1.9, 3: 2.95, 4: 2.6, 5: 3.5}), checks={})
    assert not p.trusted
    assert "falling as w rises" in p.trust.reason and "T(4) = 2.60" in p.trust.reason and "T(3) = 2.95" in p.trust.reason
    assert [b.widths for b in p.trust.refused] == [(3, 4)]


def test_a_pass_cheaper_at_a_deeper_depth_is_refused_but_a_ratio_falling_with_depth_is_not() -> None:
    # the quiet probe: T(5) 4.12 at depth 128, 3.46 at 400, the one-row pass 5 % slower there: the
    # pass of five rows itself ran faster over more cache
    shallow = _steady({1: 1.0, 2: 1.5, 5: 4.12})
    deep_t = {1: 1.0, 2: 1.5, 5: 3.46}
    deep = [[0.0105 * deep_t[w] * (1 + 0.005 * ((r % 3) - 1)) for w in (1, 2, 5)] for r in range(5)]
    p = _probe(shallow, deeper={"depth": 400, "seconds": deep}, checks={})
    assert p.depth_span == (128, 400)
    assert not p.trusted and "falling with KV depth" in p.trust.reason and "5 rows at KV depth 400" in p.trust.reason
    # the same ratio falling, but every pass slower at 400: T(w) read against its own depth's one-row pass
    # may fall where T(w) > w (each row's attention grows alike), the passes never do
    slower = [[0.02 * deep_t[w] for w in (1, 2, 5)] for _ in range(5)]
    assert _probe(shallow, deeper={"depth": 400, "seconds": slower}, checks={}).trusted


def test_within_noise_is_read_from_the_repeats_themselves() -> None:
    # T(4) a little under T(3): tight repeats say it is real, scattered ones cannot tell
    tight = _steady({1: 1.0, 2: 1.5, 3: 2.0, 4: 1.85}, repeats=7, spread=0.003)
    assert not _probe(tight, checks={}).trusted
    scattered = {1: [1.0] * 7, 2: [1.5] * 7, 3: [1.6, 2.4, 1.7, 2.0, 2.3, 1.8, 2.2], 4: [1.5, 2.2, 1.7, 1.85, 2.1, 1.9, 1.6]}
    p = _probe(scattered, checks={})
    assert p.trusted
    # seven repeats: only min and max hold the median 90 % of the time; eight: the second from either end does (93 %)
    assert probe_rules.median_interval(scattered[3]) == (1.6, 2.0, 2.4)
    assert probe_rules.median_interval([*scattered[3], 2.05]) == (1.7, 2.025, 2.3)
    # one repeat says nothing of its noise: held to ±5 %, so 2.08 at width 2 is within it, 2.2 is not
    assert _probe({1: [1.0], 2: [2.08], 3: [2.5]}, checks={}).trusted
    assert not _probe({1: [1.0], 2: [2.2], 3: [2.5]}, checks={}).trusted


def test_a_breach_above_w_that_measuring_again_repeated_is_kept_as_the_engines() -> None:
    # llama.cpp on this CPU at one thread: the logits of every row make a verify dearer than w one-row passes
    t = _steady({1: 1.0, 2: 2.53, 3: 3.43, 4: 4.26, 5: 5.51})
    refused = _probe(t, checks={})
    assert not refused.trusted
    kept = _probe(t, checks={"remeasured": {"widths": [2, 3, 4, 5]},
                             "repeated": [["ceiling", None, [w]] for w in (2, 3, 4, 5)]})
    assert kept.trusted and {b.widths[0] for b in kept.trust.engine} == {2, 3, 4, 5}
    words = kept.trust_words()
    assert "kept as this engine's" in words and "T(2) = 2.53" in words and "after measuring widths 2, 3, 4, 5 again" in words
    # a file from before the checks, with no record of a second measurement, is refused and says so
    assert "measured before the lab re-measured" in _probe(t).trust.reason


def test_only_the_rules_an_engine_can_break_are_kept_when_repeated() -> None:
    # a kernel chosen by batch size can make 8 rows cheaper than 7: repeated, the engine's
    t = _steady({1: 1.0, 2: 1.3, 7: 2.9, 8: 2.4})
    assert _probe(t, checks={"repeated": [["rising", None, [7, 8]]]}).trusted
    # the record must name the very breach: another pair of widths keeps nothing
    assert not _probe(t, checks={"repeated": [["rising", None, [2, 8]]]}).trusted
    # more cache to read is never cheaper, repeated or not
    shallow = _steady({1: 1.0, 2: 1.5})
    deep = [[0.008 * v for v in (1.0, 1.5)] for _ in range(5)]
    got = _probe(shallow, deeper={"depth": 400, "seconds": deep}, checks={"repeated": [["depth", 400, [1]], ["depth", 400, [2]]]})
    assert not got.trusted and "falling with KV depth" in got.trust.reason


def test_a_driver_refusal_holds_for_every_depth_of_it() -> None:
    p = _probe(_steady(GOOD), checks={"refused": "falling with KV depth: 5 rows at KV depth 400 took 0.80"})
    assert not p.trusted and p.trust.reason.startswith("falling with KV depth")


def test_a_step_priced_probe_has_no_ceiling() -> None:
    # a server's step at n_max 4 holds four drafts of a draft model: dearer than five one-row passes is no breach
    p = _probe(_steady({1: 1.0, 2: 2.4, 5: 7.1}), checks={}, notes={"prices": probes.PRICES_STEPS})
    assert p.trusted


def test_nothing_is_priced_with_an_untrusted_probe() -> None:
    from lab.analysis import policy

    p = _probe(_steady(GOOD | {7: 9.0, 10: 20.6}), checks={})
    acceptance = PositionAcceptance(reached=(10, 8, 6), accepted=(8, 6, 4))
    inputs = predict.ArmInputs(baseline_token_s=0.01, draft_s_per_token=0.0, plain_share=0.1, n_max=3)
    with pytest.raises(probes.UntrustedProbe, match="no trustworthy probe"):
        predict.predict(acceptance, p, inputs)
    with pytest.raises(probes.UntrustedProbe, match="no trustworthy probe"):
        policy.step_prices(p, inputs, 3)
    good = _probe(_steady(GOOD), checks={})
    assert predict.predict(acceptance, good, inputs)


def test_a_surface_is_checked_across_its_depths() -> None:
    a = _probe(_steady({1: 1.0, 2: 1.5, 4: 2.5}), one_s=0.01)
    b = _probe(_steady({1: 1.0, 2: 1.5, 4: 2.5}), one_s=0.008)
    surface = probes.Surface((dataclassy(a, depth=128), dataclassy(b, depth=2048)))
    assert not surface.trust.trusted and "at KV depth 2048" in surface.trust.reason


def dataclassy(p: probes.Probe, **changes: Any) -> probes.Probe:
    import dataclasses

    return dataclasses.replace(p, **changes)


# -- the driver: cycles, the stopping rule, measuring again -----------------------------------------------


class Scripted(FakeBackend, Probing):
    """Seconds per width from :attr:`script` (call number, width, depth) -> seconds; records each call's
    widths in order, so the order the driver asks for is seen."""

    name = "fake-scripted-probe"
    probe_methods = ("scripted",)
    probe_depth_methods = ("scripted",)
    script: ClassVar[Callable[[int, int, int | None], float]] = staticmethod(lambda i, w, d: 0.01 * (1 + 0.4 * (w - 1)))
    calls: ClassVar[list[tuple[int | None, tuple[int, ...]]]] = []

    def measure_verify_cost(self, widths: Sequence[int], method: str | None = None) -> list[float]:
        return self._timed(widths, None)

    def measure_verify_cost_at_depth(self, widths: Sequence[int], depth: int, method: str | None = None) -> list[float]:
        return self._timed(widths, depth)

    def _timed(self, widths: Sequence[int], depth: int | None) -> list[float]:
        i = len(Scripted.calls)
        Scripted.calls.append((depth, tuple(widths)))
        return [Scripted.script(i, w, depth) for w in widths]


class _Plugin:
    __name__ = "tests.test_probe_trust"

    @hookimpl
    def lab_register_backends(self, register: Callable[[type[Backend]], None]) -> None:
        register(Scripted)


@pytest.fixture
def registry() -> Registry:
    Scripted.calls.clear()
    return load_registry(extra_plugins=[_Plugin()])


def _measure(registry: Registry, widths: Sequence[int], script: Callable[[int, int, int | None], float],
             depths: Sequence[int | None] = (None,), said: list[str] | None = None) -> list[probes.Probe]:
    Scripted.script = staticmethod(script)  # type: ignore[assignment]
    return driver.measure_depths("fake-scripted-probe", "", depths, widths, repeats=1, registry=registry,
                                 bandwidth=False, progress=(said.append if said is not None else None))


def _jitter(i: int) -> float:
    """A few tenths of a percent, varying by call: repeats that are not identical."""
    return 1 + 0.002 * ((i * 7) % 5 - 2)


def test_widths_alternate_cycle_by_cycle_until_stable(registry: Registry) -> None:
    got = _measure(registry, (1, 2, 3, 4), lambda i, w, d: 0.01 * (1 + 0.4 * (w - 1)) * _jitter(i + w))[0]
    # three cycles at least, each every width, each in an order turned by one
    assert [ws for _, ws in Scripted.calls] == [(1, 2, 3, 4), (2, 3, 4, 1), (3, 4, 1, 2)]
    assert len(got.seconds) == 3 and got.notes["cycles"] == 3
    assert "3 cycles of every width, each T(w) within ±3% of its median" in got.notes["stopped"]
    assert got.trusted and not got.trust.remeasured


def test_noisy_cycles_go_on_to_the_cap(registry: Registry) -> None:
    noisy = lambda i, w, d: 0.01 * (1 + 0.4 * (w - 1)) * (1.3 if (i + w) % 2 else 1.0)  # noqa: E731
    got = _measure(registry, (1, 2, 3), noisy)[0]
    assert len(got.seconds) == driver.MAX_CYCLES
    assert f"{driver.MAX_CYCLES} cycles of every width (the most a probe runs), not yet" in got.notes["stopped"]


def test_a_flaky_width_is_measured_again_to_a_good_curve(registry: Registry) -> None:
    # width 5's passes ran slow in the first cycles (another process took the core): T(5) = 13
    def flaky(i: int, w: int, d: int | None) -> float:
        base = 0.01 * (1 + 0.4 * (w - 1)) * _jitter(i + w)
        return base * 5 if w == 5 and i < 3 else base

    said: list[str] = []
    got = _measure(registry, (1, 2, 3, 4, 5), flaky, said=said)[0]
    assert any("measuring width 5 again" in s and "T(5) = " in s for s in said), said
    # the second measurement: width 1 and width 5 only, as many cycles as the first
    assert [ws for _, ws in Scripted.calls[3:]] == [(1, 5), (5, 1), (1, 5)]
    assert got.trusted and got.trust.remeasured == (5,)
    assert got.t_ratio(5) == pytest.approx(2.6, rel=0.02)
    first = {(w): mid for _d, w, _lo, mid, _hi in got.notes["checks"]["remeasured"]["first"]}
    assert first[5] == pytest.approx(13.0, rel=0.02)
    assert "after measuring width 5 again" in got.trust_words()


def test_a_curve_still_falling_after_measuring_again_is_refused(registry: Registry) -> None:
    # T(4) under T(3) the first time and again the second, but nowhere near where it was: the load
    def falling(i: int, w: int, d: int | None) -> float:
        t = {1: 1.0, 2: 1.9, 3: 2.95, 4: 2.6 if i < 3 else 2.0}[w]
        return 0.01 * t * _jitter(i + w)

    said: list[str] = []
    got = _measure(registry, (1, 2, 3, 4), falling, said=said)[0]
    assert any("measuring widths 3-4 again" in s for s in said), said
    assert not got.trusted
    assert got.trust.reason.startswith("falling as w rises") and "T(4) = 2.00" in got.trust.reason
    assert "measured twice, they disagree beyond their noise" in got.trust.reason
    assert "T(4) 2.6" in got.trust.reason and "T(3) 2.9" not in got.trust.reason
    assert "(after measuring widths 3, 4 again)" in got.trust.reason


def test_a_steady_fall_in_w_is_the_engines(registry: Registry) -> None:
    # 8 rows cheaper than 7, the same both times: a kernel picked by batch size, kept and said
    steady = lambda i, w, d: 0.01 * {1: 1.0, 2: 1.3, 7: 2.9, 8: 2.4}[w] * _jitter(i + w)  # noqa: E731
    got = _measure(registry, (1, 2, 7, 8), steady)[0]
    assert got.trusted and [b.widths for b in got.trust.engine] == [(7, 8)]
    assert "rising in w" not in got.trust_words() and "falling as w rises" in got.trust_words()


def test_depths_alternate_and_a_pass_faster_deeper_is_refused(registry: Registry) -> None:
    def deeper_faster(i: int, w: int, d: int | None) -> float:
        depth_cost = 1 + (d or 0) / 4000
        return 0.01 * depth_cost * (1 + 0.4 * (w - 1)) * (0.8 if w == 4 and d == 400 else 1.0) * _jitter(i + w)

    got = _measure(registry, (1, 2, 4), deeper_faster, depths=(128, 400))
    # the depths take turns, shallow first on even cycles
    assert [d for d, _ in Scripted.calls[:6]] == [128, 400, 400, 128, 128, 400]
    assert all(not p.trusted for p in got)
    assert "falling with KV depth" in got[0].trust.reason and "4 rows at KV depth 400" in got[0].trust.reason


def test_a_width_that_fails_keeps_the_widths_that_ran(registry: Registry) -> None:
    class Fails(Scripted):
        def _timed(self, widths: Sequence[int], depth: int | None) -> list[float]:
            ran = {w: 0.01 * (1 + 0.4 * (w - 1)) for w in widths if w < 8}
            if len(ran) < len(widths):
                raise probes.ProbeWidthsFailed(ran, {w: f"{probes.OUT_OF_MEMORY}: the server exited while loading"
                                                     for w in widths if w >= 8})
            return [ran[w] for w in widths]

    registry.backends["fake-scripted-probe"] = Fails
    got = _measure(registry, (1, 2, 4, 8, 16), lambda i, w, d: 0.0)[0]
    assert got.widths == (1, 2, 4) and got.trusted
    assert got.widths_failed == {8: "out of memory: the server exited while loading",
                                 16: "out of memory: the server exited while loading"}
    assert "widths 8,16 did not fit (out of memory: the server exited while loading)" in got.failed_words()
    # predictions use what ran: every n_max the kept widths cover, none past them
    acceptance = PositionAcceptance(reached=(10, 8, 6, 4, 2), accepted=(8, 6, 4, 2, 1))
    inputs = predict.ArmInputs(baseline_token_s=0.01, draft_s_per_token=0.0, plain_share=0.1, n_max=7)
    assert [p.n_max for p in predict.predict(acceptance, got, inputs)] == [1, 2, 3]


def test_a_probe_whose_repeats_scatter_says_so_beside_the_prediction() -> None:
    # the rules cannot refuse a curve whose noise is wide, but the row priced at its width says how wide
    scattered = {1: [1.0] * 4, 2: [1.5] * 4, 5: [2.8, 3.9, 4.9, 3.1]}
    note = predict.probe_noise(_probe(scattered, checks={}), 5)
    assert note is not None and "T(5) lies anywhere in 2.80-4.90" in note and "over its 4 repeats" in note
    assert predict.probe_noise(_probe(_steady({1: 1.0, 2: 1.5, 5: 3.0}), checks={}), 5) is None
    # a width the probe did not measure, or one repeat, says nothing of its noise here
    assert predict.probe_noise(_probe(scattered, checks={}), 4) is None
    assert predict.probe_noise(_probe({1: [1.0], 5: [3.0]}, checks={}), 5) is None


def test_a_median_that_breaks_a_rule_within_wide_noise_is_measured_again(registry: Registry) -> None:
    # every other cycle stalled width 5: its median reads 7.8, past T(7) and past 5, but its spread (2.6 to 13)
    # is too wide to refuse the curve; measured again, it is 2.6
    def half_stalled(i: int, w: int, d: int | None) -> float:
        first = len(Scripted.calls[i][1]) == 4
        base = 0.01 * (1 + 0.4 * (w - 1)) * _jitter(i + w)
        return base * 5 if w == 5 and first and i % 2 == 0 else base

    got = _measure(registry, (1, 2, 5, 7), half_stalled)[0]
    assert got.trust.remeasured == (5, 7)
    first = {w: mid for _d, w, _lo, mid, _hi in got.notes["checks"]["remeasured"]["first"]}
    assert first[5] == pytest.approx(7.8, rel=0.02)
    assert got.trusted and got.t_ratio(5) == pytest.approx(2.6, rel=0.02)


def test_medians_that_still_break_a_rule_inside_a_wide_spread_are_refused(registry: Registry) -> None:
    # a third of the cycles swap which of 3 and 4 rows is dearer: the spread of each holds the other, but their
    # medians, measured twice, put 4 rows a quarter under 3
    def unsettled(i: int, w: int, d: int | None) -> float:
        t = {1: 1.0, 2: 1.5, 3: 1.5 if i % 3 == 0 else 3.0, 4: 3.8 if i % 3 == 0 else 2.2}[w]
        return 0.01 * t * _jitter(i + w)

    got = _measure(registry, (1, 2, 3, 4), unsettled)[0]
    assert not probe_rules.breaches(got.curves())  # the spread alone refuses nothing
    assert got.trust.remeasured == (3, 4) and not got.trusted
    assert got.trust.reason.startswith("falling as w rises") and "T(4) = 2.2" in got.trust.reason
    assert "medians still break a rule by more than 10% where the repeats spread too wide to settle them" in got.trust.reason
