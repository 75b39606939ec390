"""benchmarks/gpu_decode_gap/clock_windows.py lines the card's clock readings up with the
windows decode_overhead.py logs: a lab side's window is its baseline's
tokens, llama-bench's the whole side, and readings outside a window are not
counted in it."""

from __future__ import annotations

from pathlib import Path

from benchmarks.gpu_decode_gap.clock_windows import readings, windows

CSV = """timestamp, clocks.current.sm [MHz], clocks.current.memory [MHz], power.draw [W], temperature.gpu, utilization.gpu [%], clocks_event_reasons.active
2026/12/03 10:00:00.000, 345 MHz, 3201 MHz, 80.00 W, 40, 0 %, 0x0000000000000001
2026/12/03 10:00:01.500, 1980 MHz, 3201 MHz, 300.00 W, 50, 90 %, 0x0000000000000000
2026/12/03 10:00:03.000, 1755 MHz, 3201 MHz, 400.00 W, 55, 99 %, 0x0000000000000004
"""


def test_a_lab_side_is_its_baseline_tokens_and_llama_bench_its_side(tmp_path: Path) -> None:
    t0 = 1796292000.0  # 2026-12-03 10:00:00 UTC
    (tmp_path / "c.csv").write_text(CSV)
    (tmp_path / "t.txt").write_text(
        f"timeline base tokens: {t0 + 1:.3f} {t0 + 2:.3f}\n"
        f"timeline repeat 1 lab: {t0 - 5:.3f} {t0 + 10:.3f}\n"
        f"timeline repeat 1 llama-bench: {t0 + 2.5:.3f} {t0 + 3.5:.3f}\n"
    )
    got = windows(tmp_path / "t.txt")
    assert got == [("repeat 1 lab, baseline tokens", t0 + 1, t0 + 2), ("repeat 1 llama-bench", t0 + 2.5, t0 + 3.5)]
    seen = readings(tmp_path / "c.csv", 0.0)
    assert [r.t - t0 for r in seen] == [0.0, 1.5, 3.0]
    inside = [[r.sm_mhz for r in seen if a <= r.t <= b] for _, a, b in got]
    assert inside == [[1980], [1755]]
    # a zone one hour east of UTC moves every reading an hour earlier
    assert [r.t - t0 for r in readings(tmp_path / "c.csv", 1.0)] == [-3600.0, -3598.5, -3597.0]
