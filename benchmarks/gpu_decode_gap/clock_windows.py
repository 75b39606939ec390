"""The card's clocks inside each timed window of a benchmark.

Lines up nvidia-smi's readings (``--query-gpu=timestamp,clocks.sm,
clocks.mem,power.draw,temperature.gpu,utilization.gpu[,clocks_event_reasons.active]
--format=csv -lms 100``, as the device driver's ``card_clocks`` writes them)
with the wall-clock spans decode_overhead.py writes to stderr
(``timeline ...: START END``). For each lab side, the window is its
baseline's measured tokens; for llama-bench, the whole side. Prints per
window the SM and memory clocks seen, mean power, the highest temperature
and the clock-event reasons (0x0: none held the clocks down).

    python -m benchmarks.gpu_decode_gap.clock_windows CLOCKS.csv TIMELINE.txt [--utc-offset HOURS]

nvidia-smi prints local time; ``--utc-offset`` is that zone's offset (0
where the machine runs on UTC).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Reading:
    t: float
    sm_mhz: int
    mem_mhz: int
    power_w: float
    temp_c: int
    reasons: str


def readings(path: Path, utc_offset_h: float) -> list[Reading]:
    zone = datetime.timezone(datetime.timedelta(hours=utc_offset_h))
    out = []
    rows = list(csv.reader(path.read_text().splitlines()))
    for row in rows[1:]:
        if len(row) < 6:
            continue
        stamp = datetime.datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=zone)
        out.append(Reading(stamp.timestamp(), int(row[1].split()[0]), int(row[2].split()[0]),
                           float(row[3].split()[0]), int(row[4]), row[6].strip() if len(row) > 6 else "?"))
    return out


def windows(path: Path) -> list[tuple[str, float, float]]:
    """(label, start, end): a lab side's label goes with the baseline tokens
    line written just before its own line."""
    out: list[tuple[str, float, float]] = []
    tokens: tuple[float, float] | None = None
    for line in path.read_text().splitlines():
        m = re.match(r"timeline (.*): ([\d.]+) ([\d.]+)$", line.strip())
        if not m:
            continue
        label, start, end = m.group(1), float(m.group(2)), float(m.group(3))
        if label == "base tokens":
            tokens = (start, end)
            continue
        if tokens is not None:
            out.append((label + ", baseline tokens", *tokens))
            tokens = None
        else:
            out.append((label, start, end))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("clocks", type=Path)
    ap.add_argument("timeline", type=Path)
    ap.add_argument("--utc-offset", type=float, default=0.0)
    args = ap.parse_args()
    seen = readings(args.clocks, args.utc_offset)
    for label, start, end in windows(args.timeline):
        inside = [r for r in seen if start <= r.t <= end]
        if not inside:
            print(f"{label:<40} no readings inside")
            continue
        print(f"{label:<40} {len(inside):3d} readings, SM {min(r.sm_mhz for r in inside)}-{max(r.sm_mhz for r in inside)}"
              f" MHz, memory {min(r.mem_mhz for r in inside)}-{max(r.mem_mhz for r in inside)} MHz, "
              f"{statistics.mean(r.power_w for r in inside):.0f} W, up to {max(r.temp_c for r in inside)} C, "
              f"reasons {' '.join(sorted({r.reasons for r in inside}))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
