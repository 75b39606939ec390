"""The order every engine's verify-cost probe times its passes in."""

from __future__ import annotations

import pytest

from lab.kit.pass_order import median_pass_seconds


def _recorder() -> tuple[list[int], object]:
    seen: list[int] = []

    def one_pass(w: int) -> float:
        seen.append(w)
        return w * 0.001 + len(seen) * 1e-6

    return seen, one_pass


def test_consecutive_times_each_width_back_to_back_after_its_untimed_passes() -> None:
    seen, one_pass = _recorder()
    got = median_pass_seconds(one_pass, (1, 4), inner=3, order="consecutive", warm=2)  # type: ignore[arg-type]
    assert seen == [1] * 5 + [4] * 5
    # the median of the timed passes only: the third of 1's five, the eighth call overall for 4
    assert got == [pytest.approx(0.001 + 4e-6), pytest.approx(0.004 + 9e-6)]


def test_interleaved_cycles_the_widths_after_one_untimed_pass_each() -> None:
    seen, one_pass = _recorder()
    median_pass_seconds(one_pass, (1, 4), inner=2, order="interleaved", warm=2)  # type: ignore[arg-type]
    assert seen == [1, 4, 1, 4, 1, 4]
    with pytest.raises(ValueError, match="probe order"):
        median_pass_seconds(one_pass, (1,), inner=1, order="random", warm=0)  # type: ignore[arg-type]
