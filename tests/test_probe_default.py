"""Every run measures (or finds cached) its stacks' verify cost T(w) and the
machine's bandwidth before the arms, so every report predicts and has a
roofline: cache hits and misses, ``[run] probe = false``, a named probe
file, the bandwidth benchmark, and a real SmolLM2 run's report."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable, ClassVar, Sequence

import pytest

from lab.api import Backend, Probing
from lab.base import probe as probes
from lab.base.events import StatusChanged
from lab.hookspecs import hookimpl
from lab.probing import driver
from lab.profile.load import parse_profile
from lab.registry import Registry, load_registry
from lab.render.report import load_for_report, render_markdown
from lab.runner import Runner
from lab.store import RunStore
from lab.telemetry import bandwidth, contention
from tests.fakes import FakeBackend, fake_plugin


class ProbingFake(FakeBackend, Probing):
    """The fake stream with a verify cost that grows with width; it counts
    how often it is asked, so a cache hit is visible."""

    name = "fake-probing"
    probe_methods = ("scripted",)
    calls: ClassVar[list[tuple[int, ...]]] = []

    def measure_verify_cost(self, widths: Sequence[int], method: str | None = None) -> list[float]:
        ProbingFake.calls.append(tuple(widths))
        return [0.01 * (1 + 0.25 * (w - 1)) for w in widths]


class _Plugin:
    __name__ = "tests.test_probe_default"

    @hookimpl
    def lab_register_backends(self, register: Callable[[type[Backend]], None]) -> None:
        register(ProbingFake)


@pytest.fixture
def registry() -> Registry:
    return load_registry(extra_plugins=[fake_plugin, _Plugin()])


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private cache root, and a fixed bandwidth so these tests spend no
    time on the benchmark (it has a test of its own)."""
    root = tmp_path / "cache"
    monkeypatch.setenv("LAB_CACHE_DIR", str(root))
    monkeypatch.setattr(bandwidth, "_measure", lambda threads: (5e9, "fixed for the test"))
    # the load a cached probe is reused beside: held still, whatever else runs here
    monkeypatch.setattr(contention, "others_busy_cores", lambda window_s=0.3: 0.0)
    ProbingFake.calls.clear()
    return root / "probes"


def _profile(tmp_path: Path, registry: Registry, run_extra: str = "", threads: int = 1, backend: str = "fake-probing") -> Any:
    text = f"""
[profile]
name = "probe-default"

[run]
max_tokens = 12
rounds = 1
warmup = 0
threads = {threads}
{run_extra}

[[prompts]]
name = "prose"
text = "Write about prose."

[[arms]]
name = "base"
backend = "{backend}"
options = {{ virtual_clock = true }}

[[arms]]
name = "spec"
backend = "{backend}"
n_max = 3
options = {{ speculative = true, accepted = [3, 1], virtual_clock = true }}
"""
    return parse_profile(text, str(tmp_path / "p.toml"), registry)


def _run(tmp_path: Path, registry: Registry, profile: Any) -> tuple[Path, list[Any]]:
    events: list[Any] = []
    store = RunStore(profile, tmp_path / "runs")
    Runner(profile, registry, store, [events.append]).run()
    return store.path, events


def test_needed_widths_cover_the_n_max_and_a_few_more() -> None:
    assert probes.needed_widths([4]) == (1, 2, 3, 4, 5, 7, 10)
    assert probes.needed_widths([2, 7]) == (1, 2, 3, 4, 5, 6, 7, 8, 10, 16)
    assert max(probes.needed_widths([30])) == 31 + 16


def test_cache_key_changes_with_threads_model_options_and_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    base = driver.ProbeSpec("llamacpp", "embedded:smollm2", 2, {"n_gpu_layers": 0}, (1, 2, 3))
    key = base.key()
    assert driver.ProbeSpec("llamacpp", "embedded:smollm2", 2, {"n_gpu_layers": 0}, (1, 2, 3, 4)).key() == key
    assert driver.ProbeSpec("llamacpp", "embedded:smollm2", 1, {"n_gpu_layers": 0}, (1, 2, 3)).key() != key
    assert driver.ProbeSpec("llamacpp", "tiny:llama", 2, {"n_gpu_layers": 0}, (1, 2, 3)).key() != key
    assert driver.ProbeSpec("llamacpp", "embedded:smollm2", 2, {"n_gpu_layers": 99}, (1, 2, 3)).key() != key
    assert driver.ProbeSpec("mlx", "embedded:smollm2", 2, {"n_gpu_layers": 0}, (1, 2, 3)).key() != key
    other_machine = {**bandwidth.machine_identity(), "gpus": ["NVIDIA H200"]}
    monkeypatch.setattr(bandwidth, "machine_identity", lambda: other_machine)
    assert base.key() != key


@pytest.mark.slow
@pytest.mark.alone
def test_first_run_measures_second_finds_the_cache(tmp_path: Path, registry: Registry, cache: Path) -> None:
    profile = _profile(tmp_path, registry)
    first, events = _run(tmp_path, registry, profile)
    # its figures repeat exactly: stable at the fewest cycles, each every width
    assert len(ProbingFake.calls) == driver.MIN_CYCLES
    assert ProbingFake.calls[0] == probes.needed_widths([3])
    saved = probes.load(first)
    assert saved.origin["source"] == "measured" and saved.bandwidth_bytes_s == 5e9
    assert saved.t_ratio(4) == pytest.approx(1.75)
    assert len(list(cache.glob("probe-*.json"))) == 1
    # the probe comes before every arm's first status: it never overlaps a timed cell
    done = next(i for i, e in enumerate(events) if isinstance(e, probes.ProbeReported) and e.done and e.probe)
    first_arm = next(i for i, e in enumerate(events) if isinstance(e, StatusChanged))
    assert done < first_arm
    assert re.fullmatch(r"measured in \d+\.\d s", events[done].text)

    second, events = _run(tmp_path, registry, profile)
    assert len(ProbingFake.calls) == driver.MIN_CYCLES  # nothing measured again
    again = probes.load(second)
    assert again.origin["source"] == "cached" and again.seconds == saved.seconds
    assert any(isinstance(e, probes.ProbeReported) and e.text.startswith("cached (measured ") for e in events)

    # other threads are another stack: measured again
    _run(tmp_path, registry, _profile(tmp_path, registry, threads=2))
    assert len(ProbingFake.calls) == 2 * driver.MIN_CYCLES
    assert len(list(cache.glob("probe-*.json"))) == 2


@pytest.mark.slow
@pytest.mark.alone
def test_a_cached_probe_too_narrow_for_a_larger_n_max_is_measured_again(tmp_path: Path, cache: Path, registry: Registry) -> None:
    spec = driver.ProbeSpec("fake-probing", "", 1, {}, probes.needed_widths([2]))
    driver.obtain(spec, registry, repeats=1)
    assert driver.cached(spec) is not None
    wider = driver.ProbeSpec("fake-probing", "", 1, {}, probes.needed_widths([8]))
    assert driver.cached(wider) is None
    assert driver.obtain(wider, registry, repeats=1).origin["source"] == "measured"


def test_probe_false_turns_it_off(tmp_path: Path, registry: Registry, cache: Path) -> None:
    run_dir, events = _run(tmp_path, registry, _profile(tmp_path, registry, "probe = false"))
    assert ProbingFake.calls == []
    assert not (run_dir / "probe.json").exists()
    assert any(isinstance(e, probes.ProbeReported) and "off" in e.text for e in events)
    md = render_markdown(load_for_report(run_dir))
    assert "turned the probe off" in md


def test_a_named_probe_file_is_still_honoured(tmp_path: Path, registry: Registry, cache: Path) -> None:
    named = probes.Probe("fake-probing", "", "scripted", (1, 2, 3, 4, 5), ((1.0, 1.1, 1.2, 1.3, 1.4),))
    probes.save(named, tmp_path / "mine.json")
    run_dir, _ = _run(tmp_path, registry, _profile(tmp_path, registry, 'probe = "mine.json"'))
    assert ProbingFake.calls == []  # nothing measured: the file is the probe
    got = probes.load(run_dir)
    assert got.seconds == named.seconds and got.origin["source"] == "file"
    md = render_markdown(load_for_report(run_dir))
    assert "probe: from mine.json" in md


def test_a_backend_that_cannot_probe_costs_the_prediction_not_the_run(tmp_path: Path, registry: Registry, cache: Path) -> None:
    run_dir, events = _run(tmp_path, registry, _profile(tmp_path, registry, backend="fake"))
    assert not (run_dir / "probe.json").exists()
    assert any(isinstance(e, probes.ProbeReported) and "cannot measure verify cost" in e.text for e in events)
    results = json.loads((run_dir / "results.json").read_text())["results"]
    assert {r["status"] for r in results} == {"ok"}


def test_bandwidth_is_positive_and_cached_per_machine(tmp_path: Path) -> None:
    assert bandwidth.measure_copy_bandwidth(nbytes=8 * 2**20, repeats=2) > 0
    first = bandwidth.machine_bandwidth(threads=1, root=tmp_path)
    assert first.bytes_s > 0 and not first.cached
    second = bandwidth.machine_bandwidth(threads=1, root=tmp_path)
    assert second.cached and second.bytes_s == first.bytes_s


# -- a real run ------------------------------------------------------------------

REAL = """
[profile]
name = "probe-real"

[run]
max_tokens = 24
rounds = 1
warmup = 0
threads = 1
n_ctx = 512

[[prompts]]
name = "code"
text = "Write a Python function that reverses a list."

[[arms]]
name = "baseline"
backend = "llamacpp"
model = "embedded:smollm2"

[[arms]]
name = "oracle"
backend = "llamacpp"
model = "embedded:smollm2"
drafter = "oracle"
n_max = 2
"""


@pytest.mark.engine
@pytest.mark.slow
def test_a_real_smollm2_run_reports_a_prediction_and_a_roofline(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    registry = load_registry()
    profile = parse_profile(REAL, str(tmp_path / "real.toml"), registry)
    store = RunStore(profile, tmp_path)
    rows = Runner(profile, registry, store).run()
    assert {r.status.value for r in rows} == {"ok"}, [r.detail for r in rows]
    assert (store.path / "probe.json").exists()
    md = render_markdown(load_for_report(store.path))
    prediction = md.split("## Prediction", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"probe: (measured in \d+\.\d s|cached \(measured )", prediction)
    if "no trustworthy probe" in prediction:
        # a probe the suite's load left unsettled is refused, never priced with, and the report says so
        assert "No prediction: no trustworthy probe" in prediction, prediction
    else:
        row = next(line for line in prediction.splitlines() if line.startswith("| oracle |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        # measured, predicted (its error), held out, best n_max (starred when past the positions
        # measured), predicted there: numbers
        assert re.fullmatch(r"\d+\.\d\dx", cells[3])
        predicted = re.fullmatch(r"\d+\.\d\dx \(([+-]\d+)%\)( ⚠ [a-z ,]+)?", cells[4])
        # within ±10 % of the measured speedup, or saying why it may not be (lab.analysis.caveats)
        assert predicted and (abs(int(predicted[1])) <= 10 or predicted[2]), cells[4]
        assert re.fullmatch(r"\d+\*?", cells[6]) and re.fullmatch(r"\d+\.\d\dx", cells[7])
    roofline = md.split("## Roofline", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"reaches \d+% of it .* = \d+\.\d\d\)", roofline), roofline
    latency = md.split("## Latency", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"\| oracle \| code \| \d+\.\d \| \d+\.\d \| \d+\.\d \| \d+\.\d \|", latency), latency


@pytest.mark.slow
def test_a_probe_measured_on_a_busy_machine_serves_its_run_but_is_not_cached(
    tmp_path: Path, cache: Path, registry: Registry, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lab.telemetry.contention import Contention, ContentionWatcher

    busy = Contention(others_cores=1.8, spare_cores=0.0, seconds=1.0)
    monkeypatch.setattr(ContentionWatcher, "reading", lambda self, since: busy)
    spec = driver.ProbeSpec("fake-probing", "", 1, {}, probes.needed_widths([2]))
    got = driver.obtain(spec, registry)
    assert got.origin["source"] == "measured" and "busy machine" in got.origin_line()
    assert "not cached" in got.origin_line()
    assert driver.cached(spec) is None
    assert list(cache.glob("bandwidth-*.json")) == []  # the bandwidth measured with it is dropped too
    driver.obtain(spec, registry)
    assert len(ProbingFake.calls) == 2 * driver.MIN_CYCLES  # measured again, not read back


def _stored(tmp_path: Path, others: float | None) -> probes.Probe:
    origin: dict[str, Any] = {"source": "measured"}
    if others is not None:
        origin["others_cores"] = others
    return probes.Probe(backend="fake-probing", model="", method="m", widths=(1, 2), seconds=((0.01, 0.012),),
                        created="2026-12-06T00:00:00+0000", machine={}, origin=origin)


@pytest.mark.parametrize(("then", "now", "reused"), [
    (0.1, 0.3, True),    # quiet then, quiet now
    (1.0, 0.0, False),   # measured beside a busy core, the machine is quiet now
    (0.0, 1.9, False),   # measured quiet, the machine is busy now
    (None, 0.2, True),   # saved before loads were kept: reused on a quiet machine
    (None, 1.5, False),  # ... and measured again on a busy one
])
def test_a_cached_probe_is_reused_only_beside_the_load_it_was_measured_beside(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, then: float | None, now: float, reused: bool) -> None:
    monkeypatch.setattr(contention, "others_busy_cores", lambda window_s=0.3: now)
    assert driver._same_load(_stored(tmp_path, then)) is reused


def test_threads_zero_is_keyed_by_the_cores_it_means(monkeypatch: pytest.MonkeyPatch) -> None:
    from lab.base import machine

    cores = machine.available_cores()
    spec = driver.ProbeSpec("llamacpp", "embedded:smollm2", 0, {}, (1, 2))
    assert spec.key() == driver.ProbeSpec("llamacpp", "embedded:smollm2", cores, {}, (1, 2)).key()
    if cores > 1:
        assert spec.key() != driver.ProbeSpec("llamacpp", "embedded:smollm2", 1, {}, (1, 2)).key()
