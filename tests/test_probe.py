"""`lab probe`: T(w) on llama.cpp in process and through llama-batched-bench,
its table parser, and the JSON the analysis reads back."""

from __future__ import annotations

import functools
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from lab_llamacpp.probe import parse_batched_bench, pass_seconds_from_bench

from lab.base import probe as probes
from lab.probing import driver

JSONL = (
    '{"n_kv_max": 2624, "n_batch": 2048, "pp": 128, "tg": 32, "pl": 1, "n_kv": 160, "t_pp": 0.1, '
    '"speed_pp": 1280.0, "t_tg": 0.32, "speed_tg": 100.0, "t": 0.42, "speed": 380.9}\n'
    "llama_perf: something unrelated\n"
    '{"pp": 128, "tg": 32, "pl": 8, "n_kv": 1280, "t_pp": 0.8, "speed_pp": 1280.0, "t_tg": 1.7, '
    '"speed_tg": 150.0, "t": 2.5, "speed": 512.0}\n'
)


def test_parse_batched_bench_jsonl() -> None:
    rows = parse_batched_bench(JSONL)
    assert [(int(r["pl"]), r["speed_tg"]) for r in rows] == [(1, 100.0), (8, 150.0)]
    seconds = pass_seconds_from_bench(rows, [1, 8])
    assert seconds == pytest.approx([0.01, 8 / 150])
    with pytest.raises(ValueError, match="no row for batch"):
        pass_seconds_from_bench(rows, [1, 2])


def test_parse_ignores_log_noise_and_separator_rows() -> None:
    text = "main: n_kv_max = 2624\n|  PP |  TG |  B | S_TG t/s |\n|-----|-----|----|----------|\n| 128 | 32 | 4 | 120.5 |\n| x | y |\n"
    assert parse_batched_bench(text) == [{"pp": 128.0, "tg": 32.0, "pl": 4.0, "speed_tg": 120.5}]


@functools.lru_cache(maxsize=1)
def engine_problem() -> str | None:
    """Why the engine cannot run here, or None. Checked in a child process:
    a llama.cpp build for another CPU dies with SIGILL, which must not take
    the test session with it."""
    code = (
        "from lab.kit import models; from lab_llamacpp import engine; "
        "m = engine.Model(str(models.resolve('embedded:smollm2'))); c = engine.Context(m, 512, 512, 1); "
        "c.decode(m.tokenize('lighthouse ' * 150)[:150], 'last'); c.decode(list(range(100, 116)), 'all'); print('ok')"
    )
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "the engine check timed out"
    if out.returncode < 0:
        return f"llama.cpp does not run here: killed by {signal.Signals(-out.returncode).name}"
    if out.returncode != 0 or "ok" not in out.stdout:
        last = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
        return f"llama.cpp does not run here: {last}"
    return None


@pytest.fixture(scope="module")
def engine_ok() -> None:
    why = engine_problem()
    if why:
        pytest.skip(why)


@pytest.mark.slow
def test_decode_probe_in_process(engine_ok: None) -> None:
    p = driver.measure(
        "llamacpp", "embedded:smollm2", (1, 2, 8), method="decode", repeats=2, threads=1, bandwidth=False
    )
    assert p.method == "decode" and p.widths == (1, 2, 8) and len(p.seconds) >= driver.MIN_CYCLES
    assert all(s > 0 for rep in p.seconds for s in rep)
    assert p.t_ratio(1) == 1.0
    # eight rows cannot be verified for less than one; on a CPU they cost more
    t8 = p.t_ratio(8)
    assert t8 is not None and t8 > 1.0
    ratio = p.batch_ratio(8)
    assert ratio is not None and ratio[0] <= ratio[1] <= ratio[2]
    assert p.model_bytes and p.model_bytes > 50 * 2**20
    assert p.notes["inner_passes"] >= 3


@pytest.mark.slow
@pytest.mark.alone  # a ratio of timings: other tests beside it bend the curve below 1
def test_batched_bench_probe(engine_ok: None) -> None:
    from lab_llamacpp.probe import batched_bench_binary

    try:
        batched_bench_binary()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    try:
        p = driver.measure(
            "llamacpp", "embedded:smollm2", (1, 2, 4), method="batched-bench", repeats=1, threads=1, bandwidth=False
        )
    except RuntimeError as exc:
        if "exited -" in str(exc):  # killed by a signal: a binary built for another CPU
            pytest.skip(f"llama-batched-bench does not run here: {exc}")
        raise
    assert p.method == "batched-bench"
    assert sorted(int(r["pl"]) for r in p.notes["rows"]) == [1, 2, 4]
    assert (p.t_ratio(4) or 0) > 1.0


@pytest.mark.slow
def test_cli_probe_saves_json(engine_ok: None, tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "lab.cli", "probe", "--widths", "1-3", "--repeats", "1", "--no-bandwidth", "--threads", "1",
         "--out", str(tmp_path), "--quiet"],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "T(w)" in out.stdout and "saved:" in out.stdout
    data = json.loads((tmp_path / "probe.json").read_text())
    assert data["kind"] == "speclab.probe" and data["widths"] == [1, 2, 3]
    assert probes.load(tmp_path).method == "decode"


@pytest.mark.slow
def test_cli_probe_errors_are_one_line(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "lab.cli", "probe", "--backend", "nope", "--no-bandwidth"],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 2 and "unknown backend" in out.stderr and "Traceback" not in out.stderr
    out = subprocess.run(
        [sys.executable, "-m", "lab.cli", "probe", "--method", "psychic", "--no-bandwidth"],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 2 and "not 'psychic'" in out.stderr


def test_a_backend_without_the_probing_capability_is_refused() -> None:
    from lab.api import Probing
    from tests.fakes import FakeBackend, fake_registry

    assert not issubclass(FakeBackend, Probing)
    with pytest.raises(probes.ProbeError, match="fake cannot measure verify cost"):
        driver.measure("fake", "unused", registry=fake_registry(), bandwidth=False)


def test_the_llamacpp_backends_probe_capability() -> None:
    from lab_llamacpp.backend import LlamaCppBackend

    from lab.api import Probing

    assert issubclass(LlamaCppBackend, Probing)
    assert LlamaCppBackend.probe_methods[0] == "decode"
