"""GPU telemetry through a whole run, without a GPU: the runner samples a
reader standing in for NVML (a card whose energy counter runs at a known
power and whose per-process memory grows), and every row carries the GPU
keys, gpu.json lands beside the run, live readings reach listeners; a run
on a machine without a GPU leaves the keys null and writes no gpu.json."""

from __future__ import annotations

import gzip
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from lab.base.events import STEP_ONLY, Cell, Clock, MemorySample, StepClocks, StepEvent, now
from lab.base.row import GPU_KEYS
from lab.profile.load import parse_profile
from lab.registry import load_registry
from lab.runner import Runner
from lab.store import RunStore, load_run
from lab.telemetry import gpu
from tests.fakes import fake_plugin

WATTS = 400.0
BASE_BYTES = 1 << 30
MIB = 1 << 20


class SteadyCard:
    """A card drawing WATTS, its energy counter exact to the reading, the
    lab's process holding BASE_BYTES and one MiB more every reading."""

    source = "recorded"

    def __init__(self) -> None:
        self.t0 = now()
        self.reads = 0
        self.closed = False
        self._lock = threading.Lock()

    def read(self) -> list[gpu.GpuSample]:
        with self._lock:
            self.reads += 1
            n = self.reads
        t = now()
        held = BASE_BYTES + n * MIB
        return [gpu.GpuSample(
            t=t, index=0, name="NVIDIA H200", memory_used_bytes=held + 500 * MIB, memory_total_bytes=150 << 30,
            utilization_pct=90.0, power_w=WATTS, energy_j=1000.0 + WATTS * (t - self.t0),
            process_bytes={os.getpid(): held, 999999: 7 * MIB},
        )]

    def close(self) -> None:
        self.closed = True


PROFILE = """
[run]
max_tokens = 24
rounds = 2
# these tests count the rows: no rounds added for noise
max_rounds = 2
warmup = 1

[[prompts]]
name = "p"
text = "a"

[[arms]]
name = "base"
backend = "fake"
options = { token_delay_s = 0.004 }

[[arms]]
name = "spec"
backend = "fake"
n_max = 4
options = { speculative = true, accepted = [3, 1], token_delay_s = 0.004 }
"""


def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reader: Any) -> tuple[list[Any], list[Any], Path]:
    monkeypatch.setattr(gpu, "open_reader", lambda: reader)
    registry = load_registry(extra_plugins=[fake_plugin])
    profile = parse_profile(PROFILE, str(tmp_path / "gpu.toml"), registry)
    store = RunStore(profile, tmp_path / "runs")
    heard: list[Any] = []
    rows = Runner(profile, registry, store, [heard.append]).run()
    return rows, heard, store.path


def test_rows_carry_energy_per_token_split_by_phase_and_peaks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    card = SteadyCard()
    rows, heard, run_dir = run(tmp_path, monkeypatch, card)
    assert card.closed
    assert [r["status"] for r in rows] == ["ok"] * 4
    steps = [e for e in heard if isinstance(e, StepEvent) and not e.cell.is_warmup]
    for row in rows:
        assert row["gpu_name"] == "NVIDIA H200"
        # a steady 400 W over the generation phase, per generated token
        assert row["gpu_energy_j"] == pytest.approx(WATTS * row["gen_s"], rel=1e-6)
        assert row["energy_per_token_j"] == pytest.approx(WATTS * row["gen_s"] / row["n_tokens"], rel=1e-6)
        assert row["gpu_mean_power_w"] == pytest.approx(WATTS, rel=1e-6)
        # this process's bytes only (not the other pid), the arm's peak so far
        assert BASE_BYTES < row["gpu_peak_mem_bytes"] < BASE_BYTES + card.reads * MIB + 1
        assert row["gpu_card_peak_bytes"] == pytest.approx(row["gpu_peak_mem_bytes"] + 500 * MIB, abs=MIB)
        mine = [s for s in steps if (s.cell.arm, s.cell.prompt, s.cell.round) == (row["arm"], row["prompt"], row["round"])]
        if row["arm"] == "base":
            assert row["draft_energy_j"] is None and row["verify_energy_j"] is None
            continue
        assert mine
        assert row["draft_energy_j"] == pytest.approx(WATTS * sum(s.draft_s for s in mine), rel=1e-6)
        assert row["verify_energy_j"] == pytest.approx(WATTS * sum(s.verify_s for s in mine), rel=1e-6)
        assert row["draft_energy_j"] + row["verify_energy_j"] <= row["gpu_energy_j"] * (1 + 1e-9)
    # peaks only grow through an arm
    spec = [r["gpu_peak_mem_bytes"] for r in rows if r["arm"] == "spec"]
    assert spec == sorted(spec)

    saved = load_run(run_dir)
    first = saved["results"][0]
    assert first["energy_per_token_j"] == pytest.approx(rows[0]["energy_per_token_j"])
    summary = json.loads((run_dir / gpu.GPU_FILE).read_text())
    assert summary["gpu"] == "NVIDIA H200" and summary["source"] == "recorded"
    lo, med, hi = summary["per_arm"]["spec"]["energy_per_token_j"]
    assert lo <= med <= hi
    assert summary["per_arm"]["spec"]["draft_share"] + summary["per_arm"]["spec"]["verify_share"] <= 1 + 1e-9
    assert summary["per_arm"]["base"]["draft_share"] is None
    assert len(summary["cells"]) == 4
    with gzip.open(run_dir / gpu.SAMPLES_FILE, "rt") as fh:
        cols = json.load(fh)
    assert len(cols["t"]) == summary["samples"] == len(cols["energy_j"])


def test_live_readings_reach_listeners(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu, "EMIT_INTERVAL_S", 0.0)
    _rows, heard, _dir = run(tmp_path, monkeypatch, SteadyCard())
    live = [e for e in heard if isinstance(e, gpu.GpuSampled)]
    assert live, "no GPU readings were emitted"
    in_arm = [e for e in live if e.arm]
    assert {e.arm for e in in_arm} <= {"base", "spec"}
    assert all(e.process_bytes is not None and e.process_bytes > BASE_BYTES for e in in_arm)
    assert all(e.power_w == WATTS for e in live)
    # the memory lane's device figure is the arm's processes' bytes
    device = [e.device_bytes for e in heard if isinstance(e, MemorySample) and e.device_bytes is not None]
    assert device and all(d > BASE_BYTES for d in device)


def test_a_run_without_a_gpu_leaves_the_keys_null(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows, heard, run_dir = run(tmp_path, monkeypatch, None)
    assert rows and all(r["status"] == "ok" for r in rows)
    for row in rows:
        assert all(row[k] is None for k in GPU_KEYS)
    saved = load_run(run_dir)["results"][0]
    assert all(k in saved and saved[k] is None for k in GPU_KEYS)
    assert not (run_dir / gpu.GPU_FILE).exists()
    assert not any(isinstance(e, gpu.GpuSampled) for e in heard)


def test_steps_not_clocked_as_they_ran_get_no_split() -> None:
    """A server's steps come from its log after the request: their times
    are known, not when each phase ran, so the cell's joules stand alone."""
    card = SteadyCard()
    telemetry = gpu.RunTelemetry(card, interval=0.001)
    telemetry.start()
    try:
        telemetry.begin_arm("server", lambda: [])
        t0 = now()
        while now() - t0 < 0.05:
            pass
        t1 = now()
        cell = Cell("server", "p", 1)
        logged = StepClocks(draft=Clock.SERVER_LOG, verify=Clock.SERVER_LOG, step=Clock.SERVER_LOG)
        steps = [StepEvent(cell, 0, 4, 4, 5, 0.01, 0.02, 0.03, clocks=logged, t=t1)]
        keys = telemetry.cell_keys("server", "p", 1, t1, t1 - t0, 10, steps)
        assert keys["gpu_energy_j"] == pytest.approx(WATTS * (t1 - t0), rel=1e-6)
        assert keys["draft_energy_j"] is None and keys["verify_energy_j"] is None
        fused = [StepEvent(cell, 0, 4, 4, 5, None, None, 0.03, clocks=STEP_ONLY, t=t1)]
        assert telemetry.cell_keys("server", "p", 1, t1, t1 - t0, 10, fused)["draft_energy_j"] is None
        # a cell that generated nothing has peaks but no energy
        failed = telemetry.cell_keys("server", "p", 2)
        assert failed["gpu_energy_j"] is None and failed["gpu_card_peak_bytes"] is not None
    finally:
        telemetry.stop()


def test_result_rows_list_the_gpu_keys_beyond_the_contract() -> None:
    from lab.base.row import RESULT_KEYS, ROW_KEYS

    assert set(GPU_KEYS) <= set(ROW_KEYS)
    assert not set(GPU_KEYS) & set(RESULT_KEYS)  # the contract's keys stay as they were


def test_the_report_shows_energy_per_token_against_the_baseline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lab.render.report import load_for_report, render

    rows, _heard, run_dir = run(tmp_path, monkeypatch, SteadyCard())
    data = load_for_report(run_dir)
    md = render(data, "md")
    assert "## GPU: memory and energy" in md
    section = md.split("## GPU: memory and energy")[1].split("\n## ")[0]
    spec_line = next(line for line in section.splitlines() if line.startswith("| spec |"))
    import statistics

    # medians over the arm's cells (rounds the run added for noise included)
    base_jpt = [r["energy_per_token_j"] for r in rows if r["arm"] == "base"]
    spec_jpt = [r["energy_per_token_j"] for r in rows if r["arm"] == "spec"]
    ratio = statistics.median(spec_jpt) / statistics.median(base_jpt)
    assert f"{ratio:.2f}x" in spec_line
    assert "NVIDIA H200" in section and "GiB" in spec_line
    csv_text = render(data, "csv")
    assert "energy_per_token_j" in csv_text.splitlines()[0]


def test_no_gpu_section_without_readings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lab.render.report import load_for_report, render

    _rows, _heard, run_dir = run(tmp_path, monkeypatch, None)
    assert "## GPU" not in render(load_for_report(run_dir), "md")
