"""The verify-cost surface: T(w) at several KV depths (``lab probe
--depths``), its file, and ``lab predict`` naming the depth where drafting
stops paying. The arithmetic runs on hand-made surfaces; one real probe of
the embedded SmolLM2 checks that a deeper cache does not make the one-row
pass faster."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, ClassVar, Sequence

import pytest

from lab.analysis.acceptance_file import PROMPT, AcceptanceFile, Entry
from lab.analysis.measured_acceptance import PositionAcceptance
from lab.analysis.predict import ArmInputs
from lab.analysis.surface import predict_on_surface
from lab.api import Backend, Emit, Probing
from lab.base import probe as probes
from lab.cli import main
from lab.hookspecs import hookimpl
from lab.probing import driver
from lab.registry import Registry, load_registry
from lab.render.surface import render_surface_predictions, surface_table
from tests.fakes import FakeBackend

# A one-row pass at each depth, and how much each further row adds to it:
# at 8192 a row costs as much as a whole pass, so no acceptance can pay.
SHAPES = {64: (0.010, 0.05), 2048: (0.014, 0.30), 8192: (0.020, 1.00)}


def _probe(depth: int | None, t1: float, per_row: float, widths: Sequence[int] = (1, 2, 3, 4, 5)) -> probes.Probe:
    return probes.Probe(
        backend="llamacpp", model="embedded:smollm2", method="decode", widths=tuple(widths),
        seconds=(tuple(t1 * (1 + per_row * (w - 1)) for w in widths),), depth=depth,
    )


def _surface(*depths: int) -> probes.Surface:
    return probes.Surface(tuple(_probe(d, *SHAPES[d]) for d in depths))


def _entry(rate: float = 0.8, loop_s: float = 0.0, draft_s: float = 0.0, draft_model: str | None = None) -> Entry:
    reached = (1000, int(1000 * rate), int(1000 * rate ** 2), int(1000 * rate ** 3))
    accepted = (*reached[1:], int(1000 * rate ** 4))
    return Entry(
        scope=PROMPT, arm="ngram", name="prose", backend="llamacpp", target="embedded:smollm2", drafter="ngram",
        drafter_model=draft_model, n_max=4, temperature=0.0, prompts=("prose",), prompt_sha256=("0" * 64,),
        positions=PositionAcceptance(reached, accepted),
        costs=ArmInputs(baseline_token_s=0.010, draft_s_per_token=draft_s, loop_s_per_step=loop_s, plain_share=0.0,
                        n_max=None),
    )


def test_the_depth_where_drafting_stops_paying_is_named() -> None:
    got = predict_on_surface(_entry(), _surface(64, 2048, 8192))
    assert [d.depth for d in got.depths] == [64, 2048, 8192]
    assert [d.pays for d in got.depths] == [True, True, False]
    # the shallowest depth is what lab predict gives for one probe
    assert [p.speedup for p in got.depths[0].predictions] == [p.speedup for p in got.cross.predictions]
    stop = got.stops_paying()
    assert stop is not None and (stop.last_paying.depth, stop.first_losing.depth) == (2048, 8192)
    assert stop.about is not None and 2048 < stop.about < 8192
    text = render_surface_predictions(AcceptanceFile({"run": "r"}, (_entry(),)), _surface(64, 2048, 8192), [got])
    assert "drafting stops paying between depth 2048" in text and "and depth 8192" in text
    assert "the acceptance file" in text and "the probe surface of llamacpp / embedded:smollm2" in text


def test_a_surface_where_drafting_never_stops_paying_says_so() -> None:
    got = predict_on_surface(_entry(), _surface(64, 2048))
    assert got.stops_paying() is None
    text = render_surface_predictions(AcceptanceFile({}, (_entry(),)), _surface(64, 2048), [got])
    assert "pays at every measured depth, to 2048" in text and "stops paying" not in text


def test_a_surface_that_pays_only_in_the_middle_says_so() -> None:
    # every pass slower the deeper (a surface no rule refuses), T(w) flat only at the middle depth
    surface = probes.Surface((_probe(16, 0.010, 1.00), _probe(64, 0.05, 0.05), _probe(8192, 0.1, 1.00)))
    assert surface.trust.trusted, surface.trust.reason
    got = predict_on_surface(_entry(), surface)
    assert [d.pays for d in got.depths] == [False, True, False]
    text = render_surface_predictions(AcceptanceFile({}, (_entry(),)), surface, [got])
    assert "stops paying between depth 64" in text and "it does not pay at depth 16 either" in text


def test_the_loops_seconds_are_held_as_the_baseline_token_slows() -> None:
    # 2 ms of loop a step: a fifth of a baseline token at depth 64, a tenth at 8192 (20 ms a token)
    got = predict_on_surface(_entry(loop_s=0.002), _surface(64, 8192))
    assert got.depths[0].predictions[0].loop_cost == pytest.approx(0.2)
    assert got.depths[1].predictions[0].loop_cost == pytest.approx(0.1)


def test_a_draft_models_seconds_slow_with_the_target_a_lookups_do_not() -> None:
    # 1 ms a drafted token at depth 64 (a tenth of a baseline token there)
    lookup = predict_on_surface(_entry(draft_s=0.001), _surface(64, 8192))
    model = predict_on_surface(_entry(draft_s=0.001, draft_model="embedded:smollm2-q4_0"), _surface(64, 8192))
    assert lookup.depths[1].predictions[0].draft_cost == pytest.approx(0.05)
    assert model.depths[1].predictions[0].draft_cost == pytest.approx(0.1)


def test_the_table_gives_each_depth_in_its_own_and_the_shallowest_token() -> None:
    text = surface_table(_surface(64, 8192))
    own, shallow = text.split("T(w) in one-row passes at the same depth:")[1].split("the same passes in")
    row2 = next(line.split() for line in own.splitlines() if line.strip().startswith("2 "))
    assert row2 == ["2", "1.05", "2.00"]
    row1 = next(line.split() for line in shallow.splitlines() if line.strip().startswith("1 "))
    assert row1 == ["1", "1.00", "2.00"]  # the one-row pass at 8192 is two at 64


def test_the_shallowest_depth_reads_its_own_t_in_both_tables() -> None:
    # repeats that disagree: a median of ratios is not a ratio of medians
    noisy = probes.Probe(backend="llamacpp", model="embedded:smollm2", method="decode", widths=(1, 2),
                         seconds=((0.010, 0.016), (0.012, 0.015), (0.011, 0.0125)), depth=64)
    surface = probes.Surface((noisy, _probe(8192, *SHAPES[8192], widths=(1, 2))))
    assert surface.relative(noisy, 2) == pytest.approx(noisy.t_ratio(2) or 0.0)


# -- the file --------------------------------------------------------------------------

def test_the_depth_survives_the_json_and_an_old_file_loads_without_it(tmp_path: Path) -> None:
    p = _probe(2048, 0.01, 0.1)
    back = probes.load(probes.save(p, tmp_path / "p.json"))
    assert back.depth == 2048 and back.kv_depth == 2048 and "KV depth 2048" in back.render()
    old = p.to_json()
    del old["depth"]
    old["notes"] = {"prefix_tokens": 128}
    (tmp_path / "old.json").write_text(json.dumps(old))
    legacy = probes.load(tmp_path / "old.json")
    assert legacy.depth is None and legacy.kv_depth == 128
    assert "depth" not in legacy.origin_line()
    assert probes.load_surface(tmp_path / "old.json").depths == (128,)


def test_a_surface_round_trips_and_a_run_refuses_it(tmp_path: Path) -> None:
    path = probes.save_surface(_surface(64, 2048, 8192), tmp_path / "s.json")
    back = probes.load_surface(path)
    assert back.depths == (64, 2048, 8192) and back.probes[2].pass_seconds(1) == pytest.approx(0.020)
    with pytest.raises(probes.ProbeError, match="lab predict"):
        probes.load(path)


def test_depths_parse_and_a_surface_needs_them_rising() -> None:
    assert probes.parse_depths("8k, 512,2048,512") == (512, 2048, 8192)
    with pytest.raises(probes.ProbeError, match="bad depths"):
        probes.parse_depths("deep")
    with pytest.raises(probes.ProbeError, match="rise"):
        probes.Surface((_probe(2048, 0.01, 0.1), _probe(64, 0.01, 0.1)))


def test_the_origin_line_and_the_cache_key_carry_the_depth() -> None:
    p = _probe(1024, 0.01, 0.1)
    assert p.origin_line().endswith("at KV depth 1024")
    plain = driver.ProbeSpec("llamacpp", "m", 1, {}, (1, 2))
    deep = driver.ProbeSpec("llamacpp", "m", 1, {}, (1, 2), depth=1024)
    assert "depth" not in plain.identity() and deep.identity()["depth"] == 1024
    assert plain.key() != deep.key()


# -- the contract ----------------------------------------------------------------------

class FixedPrefix(FakeBackend, Probing):
    """Measures at a prefix of its own: it declares no method that places a depth."""

    name = "fake-fixed-prefix"
    probe_methods = ("scripted",)

    def measure_verify_cost(self, widths: Sequence[int], method: str | None = None) -> list[float]:
        return [0.01 * w for w in widths]


class PlacesDepth(FixedPrefix):
    """A one-row pass that slows with depth; records the context it was given."""

    name = "fake-places-depth"
    probe_depth_methods = ("scripted",)
    n_ctx: ClassVar[list[int]] = []

    loads: ClassVar[list[int]] = []

    def load(self, emit: Emit) -> None:
        PlacesDepth.loads.append(id(self))
        super().load(emit)

    def measure_verify_cost_at_depth(self, widths: Sequence[int], depth: int, method: str | None = None) -> list[float]:
        PlacesDepth.n_ctx.append(self.ctx.run.n_ctx)
        return [0.01 * (1 + depth / 1000) * (1 + 0.1 * (w - 1)) for w in widths]


class _Plugin:
    __name__ = "tests.test_probe_surface"

    @hookimpl
    def lab_register_backends(self, register: Callable[[type[Backend]], None]) -> None:
        register(FixedPrefix)
        register(PlacesDepth)


@pytest.fixture
def registry() -> Registry:
    return load_registry(extra_plugins=[_Plugin()])


def test_a_backend_that_cannot_place_a_depth_refuses_it(registry: Registry) -> None:
    with pytest.raises(probes.ProbeError, match="fake-fixed-prefix cannot place a KV depth"):
        driver.measure("fake-fixed-prefix", "", (1, 2), registry=registry, bandwidth=False, depth=512)


def test_a_context_too_small_for_depth_and_width_names_both(registry: Registry) -> None:
    with pytest.raises(probes.ProbeError, match=r"n_ctx 1024 cannot hold a KV depth of 1020 tokens and the widest "
                                                r"width 8 \(needs 1028\)"):
        driver.measure("fake-places-depth", "", (1, 8), registry=registry, bandwidth=False, depth=1020, n_ctx=1024)


@pytest.mark.slow
def test_several_depths_load_the_model_once_with_room_for_the_deepest(registry: Registry) -> None:
    PlacesDepth.loads.clear()
    PlacesDepth.n_ctx.clear()
    handed: list[int | None] = []
    got = driver.measure_depths("fake-places-depth", "", (64, 2048, 512), (1, 4), repeats=2, registry=registry,
                                bandwidth=False, on_curve=lambda c: handed.append(c.depth))
    assert len(PlacesDepth.loads) == 1
    # one context for every depth: the deepest and the widest width fit in it
    assert len(set(PlacesDepth.n_ctx)) == 1 and PlacesDepth.n_ctx[0] >= 2048 + 4
    assert handed == [64, 2048, 512] == [c.depth for c in got]
    # each depth its own curve, as many cycles each (the depths take turns in every cycle): the deeper, the
    # slower its one-row pass
    assert [len(c.seconds) for c in got] == [driver.MIN_CYCLES] * 3
    assert got[0].seconds[0][0] < got[2].seconds[0][0] < got[1].seconds[0][0]


@pytest.mark.slow
def test_a_stop_hands_over_the_cycles_that_finished(registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = PlacesDepth.measure_verify_cost_at_depth

    def stop_in_the_second_cycle(self: PlacesDepth, widths: Sequence[int], depth: int,
                                 method: str | None = None) -> list[float]:
        calls.append(depth)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(self, widths, depth, method)

    monkeypatch.setattr(PlacesDepth, "measure_verify_cost_at_depth", stop_in_the_second_cycle)
    handed: list[probes.Probe] = []
    with pytest.raises(probes.ProbeInterrupted) as stopped:
        driver.measure_depths("fake-places-depth", "", (64, 2048), (1, 2), repeats=1, registry=registry,
                              bandwidth=False, on_curve=handed.append)
    # the depths take turns within a cycle: the first cycle timed both, the second stopped half-way
    assert calls == [64, 2048, 2048]
    assert [c.depth for c in handed] == [64, 2048] and [len(c.seconds) for c in handed] == [1, 1]
    assert stopped.value.probe is not None and stopped.value.probe.notes["interrupted"] == "after 1 cycle of every width"

    calls.clear()
    with pytest.raises(probes.ProbeInterrupted) as stopped:
        monkeypatch.setattr(PlacesDepth, "measure_verify_cost_at_depth",
                            lambda self, widths, depth, method=None: (_ for _ in ()).throw(KeyboardInterrupt))
        driver.measure_depths("fake-places-depth", "", (64, 2048), (1, 2), repeats=1, registry=registry,
                              bandwidth=False)
    assert stopped.value.probe is None  # no cycle finished: nothing to keep


def test_the_llamacpp_probe_refuses_a_context_too_small() -> None:
    from lab_llamacpp import probe

    class Tiny:
        n_ctx = 256
        model = None

    with pytest.raises(ValueError, match=r"n_ctx 256 cannot hold a KV depth of 300 tokens and the widest width 4"):
        probe.decode_pass_seconds(Tiny(), (1, 2, 4), depth=300)  # type: ignore[arg-type]


def test_lab_probe_depths_saves_one_surface(registry: Registry, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    PlacesDepth.n_ctx.clear()
    out = tmp_path / "surface.json"
    code = main(["probe", "--backend", "fake-places-depth", "--model", "m", "--depths", "64,1024", "--widths", "1,2",
                 "--repeats", "1", "--no-bandwidth", "--quiet", "--out", str(out)], registry=registry)
    assert code == 0
    printed = capsys.readouterr().out
    assert "verify cost by KV depth" in printed and "KV depth 1024" in printed
    surface = probes.load_surface(out)
    assert surface.depths == (64, 1024)
    assert len(set(PlacesDepth.n_ctx)) == 1  # every depth loaded with the one context
    code = main(["probe", "--backend", "fake-fixed-prefix", "--model", "m", "--depths", "64", "--quiet",
                 "--no-bandwidth"], registry=registry)
    assert code == 2 and "cannot place a KV depth" in capsys.readouterr().err


# -- a real probe ----------------------------------------------------------------------

@pytest.mark.engine
@pytest.mark.alone
def test_a_deeper_cache_does_not_make_smollm2s_one_row_pass_faster(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    out = tmp_path / "surface.json"
    code = main(["probe", "--model", "embedded:smollm2", "--depths", "64,1024", "--widths", "1,2,4", "--repeats", "1",
                 "--no-bandwidth", "--quiet", "--out", str(out)])
    assert code == 0
    surface = probes.load_surface(out)
    assert surface.depths == (64, 1024)
    shallow, deep = surface.probes
    assert shallow.notes["prefix_tokens"] == 64 and deep.notes["prefix_tokens"] == 1024
    # attention reads 16x the cells at 1024: the pass is not faster beyond noise
    assert deep.pass_seconds(1) >= 0.9 * shallow.pass_seconds(1)


# -- a run's own probe at a depth ([run] probe_depth) ------------------------------------------

DEEP_PROFILE = """
[run]
max_tokens = 24
rounds = 1
warmup = 0
threads = 1
n_ctx = 1024
chat_template = false
probe_depth = {depth}
[[prompts]]
name = "p"
text = "Write a short poem about the sea."
[[arms]]
name = "base"
backend = "llamacpp"
model = "tiny:llama"
[[arms]]
name = "oracle"
backend = "llamacpp"
model = "tiny:llama"
drafter = "oracle"
n_max = 2
"""


def test_probe_depth_is_checked_where_the_profile_says_it() -> None:
    from lab.profile.errors import ProfileError
    from lab.profile.load import parse_profile

    got = parse_profile(DEEP_PROFILE.format(depth=512), "deep.toml", load_registry())
    assert got.run.probe_depth == 512
    with pytest.raises(ProfileError, match=r"deep\.toml:9: \[run\.probe_depth\] must be at least 0"):
        parse_profile(DEEP_PROFILE.format(depth=-1), "deep.toml", load_registry())
    with pytest.raises(ProfileError, match=r"run\.probe_depth"):
        parse_profile(DEEP_PROFILE.format(depth='"prompt"'), "deep.toml", load_registry())


def test_the_run_plans_its_probe_at_the_depth_where_the_stack_can_place_it() -> None:
    from lab.profile.load import parse_profile

    registry = load_registry()
    text = DEEP_PROFILE.format(depth=700) + """
[[arms]]
name = "server-draft"
backend = "llamacpp-server"
model = "tiny:llama"
n_max = 2
options = { spec_type = "draft-simple", draft_model = "tiny:llama" }
"""
    profile = parse_profile(text, "deep.toml", registry)
    specs, said = driver.plan(profile.arms, 1, registry, profile.run.probe_depth)
    by = {s.backend: s for s in specs}
    assert by["llamacpp"].depth == 700 and by["llamacpp-server"].depth is None
    assert any("server-draft is priced at the backend's own prefix, not at [run] probe_depth 700" in s for s in said)
    plain, _ = driver.plan(profile.arms, 1, registry)
    assert all(s.depth is None for s in plain)


def test_a_row_far_deeper_than_its_probe_says_so() -> None:
    from lab.analysis.predict import depth_disagreement

    def rows(prompt: int) -> list[dict[str, object]]:
        return [{"status": "ok", "prompt_tokens": prompt, "n_tokens": 200}]

    at_128 = _probe(128, 0.01, 0.3)
    # the row decodes around 2,100 tokens deep: priced at 128
    note = depth_disagreement(rows(2000), at_128) or ""
    assert "about 2100 tokens but the probe's passes ran at 128" in note and "probe_depth = 2100" in note
    assert depth_disagreement(rows(100), at_128) is None  # 200 against 128: close
    assert depth_disagreement(rows(500), _probe(1024, 0.01, 0.3)) is None  # within the floor
    assert depth_disagreement([{"status": "ok"}], at_128) is None  # no prompt length: nothing to say


@pytest.mark.engine
def test_a_run_with_probe_depth_prices_its_arms_at_that_depth(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    # a cache of its own: the probe at the depth is measured by the code under test
    monkeypatch.setenv("LAB_CACHE_DIR", str(tmp_path / "cache"))
    from lab.profile.load import parse_profile
    from lab.render.report import ReportWriter
    from lab.runner import Runner
    from lab.store import RunStore

    registry = load_registry()
    profile = parse_profile(DEEP_PROFILE.format(depth=600), str(tmp_path / "deep.toml"), registry)
    store = RunStore(profile, tmp_path / "runs")
    rows = Runner(profile, registry, store, [ReportWriter()]).run()
    assert all(r["status"] == "ok" for r in rows), [(r["arm"], r["detail"][:200]) for r in rows]
    got = probes.find_all(store.path)
    assert [p.depth for p in got] == [600] and got[0].notes["prefix_tokens"] == 600
    assert got[0].origin["source"] == "measured"
    report = (store.path / "report.md").read_text(encoding="utf-8")
    assert "at KV depth 600" in report
    # the row decodes some 30 tokens deep against passes at 600: the report says so
    assert "but the probe's passes ran at 600" in report


def test_a_row_far_from_its_probe_s_depth_gets_the_depth_note_not_the_clock_one() -> None:
    from lab.render.report import _t1_notes

    probe = _probe(128, 0.010, 0.3)  # one-row pass 10 ms at depth 128
    base = [{"arm": "base", "prompt": "p", "status": "ok", "tok_per_s": 1 / 0.018, "round": r, "prompt_tokens": 2000,
             "n_tokens": 128} for r in (1, 2)]
    spec = [{"arm": "spec", "prompt": "p", "status": "ok", "baseline_arm": "base", "round": r, "prompt_tokens": 2000,
             "n_tokens": 128} for r in (1, 2)]
    preds = [{"arm": "spec", "prompt": "p"}]
    notes = _t1_notes(base + spec, preds, [probe])
    # the baseline token is 80 % slower than the probe's pass because it decodes 2,064 deep: one note, the depth's
    assert len(notes) == 1 and "KV depth of about 2064 tokens" in notes[0]
    shallow = [dict(r, prompt_tokens=100) for r in base + spec]
    notes = _t1_notes(shallow, preds, [probe])
    assert len(notes) == 1 and "measured under different conditions" in notes[0]
