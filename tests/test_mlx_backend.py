"""The mlx backend and the lab's speculative loop on MLX, on tiny models the
lab writes itself (CPU MLX, real MLX code paths): greedy losslessness for
every drafter and for mlx-dflash, step accounting, the engine thread."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from lab.api import Draft, Drafter
from lab.base.events import StepEvent, TokenEvent
from lab.hookspecs import hookimpl
from lab.kit import models
from lab.profile.load import parse_profile
from lab.registry import Registry, load_registry
from lab.runner import Runner

ROOT = Path(__file__).resolve().parents[1]


def test_registration_does_not_import_mlx() -> None:
    code = (
        "import sys; import lab_mlx; from lab.api import Backend\n"
        "found = []\n"
        "lab_mlx.plugin.lab_register_backends(register=found.append)\n"
        "print(sorted((c.name, c.stack, c.accepts_drafters) for c in found)); print('mlx' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[('mlx', 'mlx', True), ('mlx-dflash', 'mlx', False), ('mlx-mtp', 'mlx', False)]"
    assert out[1] == "False"


def test_entry_points_declared() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert 'mlx = "lab_mlx:plugin"' in text


def test_tiny_models_register_through_the_hook() -> None:
    import lab_mlx

    reg = load_registry([lab_mlx.plugin])
    assert {"tiny:qwen3", "tiny:qwen3-draft", "tiny:qwen3-dflash", "tiny:qwen3-dflash2"} <= set(reg.models)
    assert reg.origins["model:tiny:qwen3"] in ("mlx", "lab_mlx")


mx = pytest.importorskip("mlx.core", reason="MLX is not installed (pip install -e '.[mlx]')")
pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def registry() -> Registry:
    reg = load_registry()
    if "mlx" not in reg.backends:
        # An install made before pyproject declared the entry point.
        import lab_mlx

        reg = load_registry([lab_mlx.plugin])
    load_registry()
    if "tiny:qwen3" not in models._BUILDERS:
        from lab_mlx.models import register_models

        register_models(models.register_model)
    return reg


PROFILE = """
[run]
max_tokens = {max_tokens}
temperature = {temperature}
rounds = 1
warmup = 0
chat_template = true
ignore_eos = true
n_ctx = 512

[[prompts]]
name = "code"
text = "def lru_cache(maxsize): return maxsize and lru_cache"

[[arms]]
name = "baseline"
backend = "mlx"
model = "tiny:qwen3"
{arms}
"""


def run_profile(registry: Registry, arms: str, max_tokens: int = 32, temperature: float = 0.0) -> tuple[list[dict[str, Any]], list[Any]]:
    text = PROFILE.format(arms=arms, max_tokens=max_tokens, temperature=temperature)
    profile = parse_profile(text, "<test>", registry)
    events: list[Any] = []
    rows = Runner(profile, registry, listeners=[events.append]).run()
    return rows, events


def check_steps(row: dict[str, Any], events: list[Any]) -> None:
    """Every output token is accounted for: the first token, plain tokens,
    and each step's landed tokens; steps' clocks add up."""
    steps = [e for e in events if isinstance(e, StepEvent) and e.cell.arm == row["arm"]]
    tokens = [e for e in events if isinstance(e, TokenEvent) and e.cell.arm == row["arm"]]
    assert sum(len(t.ids) for t in tokens) == row["n_tokens"]
    assert sum(len(t.ids) for t in tokens if t.from_draft) == row["accepted"]
    assert row["steps"] == len(steps)
    assert row["drafted"] == sum(s.drafted for s in steps)
    assert row["accepted"] == sum(s.accepted for s in steps)
    for s in steps:
        assert 0 <= s.accepted <= s.drafted
        assert s.landed == s.accepted + 1
        assert s.draft_s is not None and s.verify_s is not None
        assert s.draft_s >= 0 and s.verify_s > 0
        assert s.draft_s + s.verify_s <= s.step_s + 1e-6
    plain = row["n_tokens"] - 1 - sum(s.landed for s in steps)
    assert plain >= 0


ARMS = """
[[arms]]
name = "ngram"
backend = "mlx"
model = "tiny:qwen3"
drafter = "ngram"
n_max = 4

[[arms]]
name = "oracle"
backend = "mlx"
model = "tiny:qwen3"
drafter = "oracle"
n_max = 5
drafter_options = { error_rate = 0.3 }

[[arms]]
name = "draft-model"
backend = "mlx"
model = "tiny:qwen3"
drafter = "draft-model"
n_max = 3
drafter_options = { model = "tiny:qwen3-draft" }

[[arms]]
name = "dflash"
backend = "mlx-dflash"
model = "tiny:qwen3"
n_max = 3
options = { draft = "tiny:qwen3-dflash" }

[[arms]]
name = "dflash2"
backend = "mlx-dflash"
model = "tiny:qwen3"
options = { draft = "tiny:qwen3-dflash2", block_size = 5, draft_bits = 4 }
"""


def test_greedy_lossless_for_every_drafter(registry: Registry) -> None:
    rows, events = run_profile(registry, ARMS)
    by_arm = {r["arm"]: r for r in rows}
    assert set(by_arm) == {"baseline", "ngram", "oracle", "draft-model", "dflash", "dflash2"}
    for arm, row in by_arm.items():
        assert row["status"] == "ok", f"{arm}: {row.get('detail')}"
        assert row["n_tokens"] == 32
        if arm == "baseline":
            continue
        assert row["baseline_arm"] == "baseline"
        assert row["identical_to_baseline"] is True, f"{arm} diverges at char {row['first_divergence_char']}"
        check_steps(row, events)
    # The oracle with a 30 % error rate must both accept and reject.
    assert 0 < by_arm["oracle"]["accepted"] < by_arm["oracle"]["drafted"]
    # n_max drives mlx-dflash's block (n_max + 1) and the max yield.
    assert by_arm["dflash"]["max_yield"] == 4
    assert max(e.drafted for e in events if isinstance(e, StepEvent) and e.cell.arm == "dflash") == 3


def test_dflash_rejects_block_size_contradicting_n_max(registry: Registry) -> None:
    arms = '\n[[arms]]\nname = "bad"\nbackend = "mlx-dflash"\nmodel = "tiny:qwen3"\nn_max = 3\noptions = { draft = "tiny:qwen3-dflash", block_size = 3 }\n'
    rows, _ = run_profile(registry, arms, max_tokens=4)
    bad = next(r for r in rows if r["arm"] == "bad")
    assert bad["status"] == "error" and "n_max" in bad["detail"]


def test_temperature_sampling_runs_and_accounts(registry: Registry) -> None:
    arms = ARMS.split("[[arms]]")
    keep = "[[arms]]" + "[[arms]]".join(a for a in arms if "draft-model" in a or "dflash2" in a)
    rows, events = run_profile(registry, keep, max_tokens=24, temperature=0.8)
    for row in rows:
        assert row["status"] == "ok", f"{row['arm']}: {row.get('detail')}"
        assert row["n_tokens"] == 24
        if row["arm"] != "baseline":
            check_steps(row, events)


class _ThreadSpy(Drafter):
    name = "thread-spy"
    seen: set[str] = set()

    def begin(self, prompt_ids: Any, cell: Any) -> None:
        _ThreadSpy.seen.add(threading.current_thread().name)

    def draft(self, context: Any, k: int) -> Draft:
        _ThreadSpy.seen.add(threading.current_thread().name)
        return Draft(tuple(context[-k:]))


class _SpyPlugin:
    @hookimpl
    def lab_register_drafters(self, register: Any) -> None:
        register(_ThreadSpy)


def test_third_party_drafter_runs_on_the_engine_thread(registry: Registry) -> None:
    import lab_mlx

    reg = load_registry([_SpyPlugin()] + ([] if "mlx" in load_registry().backends else [lab_mlx.plugin]))
    _ThreadSpy.seen = set()
    arms = '\n[[arms]]\nname = "spy"\nbackend = "mlx"\nmodel = "tiny:qwen3"\ndrafter = "thread-spy"\nn_max = 2\n'
    rows, events = run_profile(reg, arms, max_tokens=12)
    spy = next(r for r in rows if r["arm"] == "spy")
    assert spy["status"] == "ok", spy.get("detail")
    assert spy["identical_to_baseline"] is True
    # MLX streams belong to their thread: all drafting happened on the arm's one engine thread.
    assert _ThreadSpy.seen == {"mlx-spy"}
    check_steps(spy, events)


def test_mlx_draft_model_loads_on_the_engine_thread(registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    import lab_mlx.draft_model as dm

    threads: list[str] = []
    original = dm.MlxDraftModel._load

    def spy(self: Any) -> None:
        threads.append(threading.current_thread().name)
        original(self)

    monkeypatch.setattr(dm.MlxDraftModel, "_load", spy)
    monkeypatch.setenv("LAB_ARM_PROCESS", "shared")  # the spy is in this process
    arms = '\n[[arms]]\nname = "dm"\nbackend = "mlx"\nmodel = "tiny:qwen3"\ndrafter = "draft-model"\nn_max = 2\ndrafter_options = { model = "tiny:qwen3-draft" }\n'
    rows, _ = run_profile(registry, arms, max_tokens=6)
    assert all(r["status"] == "ok" for r in rows), rows
    assert threads == ["mlx-dm"]


def test_memory_figures_reported(registry: Registry) -> None:
    rows, _ = run_profile(registry, "", max_tokens=4)
    row = rows[0]
    assert row["status"] == "ok"
    assert row["peak_mem_bytes"] and row["peak_mem_bytes"] > 0
    report = row["engine_report"]
    # MLX's allocator figures beside the process RSS the sampler reads.
    assert report["mlx_active_bytes"] > 0 and report["mlx_peak_bytes"] >= report["mlx_active_bytes"]
    assert report["rss_bytes"] > 0 and row["engine_bytes"] == report["mlx_active_bytes"]


def test_an_arms_peak_starts_at_its_own_load(registry: Registry) -> None:
    """MLX keeps one peak for the process, and a run's arms share it: 256 MB
    held and let go before the arm loads is not the tiny arm's peak."""
    import mlx.core as mx

    held = mx.zeros((64 * 1024 * 1024,), dtype=mx.float32)
    mx.eval(held)
    del held
    assert mx.get_peak_memory() >= 256 * 1024 * 1024
    rows, _ = run_profile(registry, "", max_tokens=4)
    report = rows[0]["engine_report"]
    assert report["mlx_peak_bytes"] < 256 * 1024 * 1024, report


def test_smoke_profile_parses(registry: Registry) -> None:
    from lab.profile.load import load_profile

    profile = load_profile(ROOT / "profiles" / "smoke-mlx.toml", registry)
    stacks = {a.stack for a in profile.arms}
    assert stacks == {"mlx"}
    assert all(a.baseline == "baseline" for a in profile.arms if not a.is_baseline)


@pytest.mark.parametrize("model", ["tiny:qwen3", "tiny:qwen3.5-hybrid"])
def test_verify_cost_probe(registry: Registry, model: str) -> None:
    from lab.probing import driver as probe
    result = probe.measure("mlx", model, widths=(1, 2, 4), repeats=1, registry=registry, bandwidth=False)
    assert result.widths == (1, 2, 4)
    # repeats is the least: a probe runs cycles until every T(w) settles, MIN_CYCLES to MAX_CYCLES of them
    assert 3 <= len(result.seconds) <= 12 and all(s > 0 for row in result.seconds for s in row)
    assert result.notes["prefix_tokens"] == 128
    # T(1) is the greedy baseline's pipelined token; the synchronous one-row pass is kept beside it
    assert "pipelined" in result.notes["one_row"] and result.notes["one_row_pass_s"] > 0
    assert result.seconds[0][0] != result.notes["one_row_pass_s"]


@pytest.mark.parametrize("model", ["tiny:qwen3", "tiny:qwen3.5-hybrid"])
def test_the_probes_baseline_token_decodes_what_the_baseline_decodes_and_rolls_back(model: str) -> None:
    """The probe times the baseline's own pipelined tokens from a prefix,
    rolled back after each run (a hybrid target's recurrent state too): the
    tokens equal a synchronous greedy decode's, and the target after the
    probe decodes as a fresh one does."""
    from lab_mlx import probe
    from lab_mlx.baseline import pipelined
    from lab_mlx.loader import load_target
    from lab_mlx.target import MlxTarget

    loaded = load_target(models.resolve(model))
    target = MlxTarget(loaded.model, loaded.vocab, 512)
    target.set_sampling(0.0, 0, True)
    prompt = loaded.vocab.encode("def lru_cache(maxsize): return maxsize and lru_cache", add_special=True)

    def synchronous(n: int) -> list[int]:
        target.reset()
        target.decode(prompt, all_logits=False)
        out = [target.pick(-1)]
        for _ in range(n):
            target.decode(out[-1:], all_logits=False)
            out.append(target.pick(-1))
        return out

    expected = synchronous(6)
    target.reset()
    target.decode(prompt, all_logits=False)
    first = target.pick(-1)
    assert [first, *pipelined(target, first, 6)] == expected

    seconds = probe.pipelined_token_seconds(target, inner=3, tokens=5)
    assert seconds > 0 and target.n_past == 0
    # rolled back within a run: a one-row decode after a timed run sees the prefix alone
    prefix = probe._prefix(target)
    target.decode(prefix, all_logits=False)
    fresh = target.logits(-1)
    target.reset()
    target.decode(prefix[:-1], all_logits=False)
    base = target.n_past
    target.decode(prefix[-1:], all_logits=False)
    first = target.pick(-1)
    for _ in pipelined(target, first, 5):
        pass
    target.n_past += 5
    target.truncate(base)
    target.decode(prefix[-1:], all_logits=False)
    assert mx.allclose(mx.array(target.logits(-1)), mx.array(fresh), atol=1e-4)
    assert synchronous(6) == expected


def test_mlx_allocation_failure_is_an_oom_result(registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    import lab_mlx.baseline as baseline

    def fail(*_a: Any, **_k: Any) -> Any:
        raise RuntimeError("[metal::malloc] Attempting to allocate 99999999999 bytes which is greater than the maximum allowed")

    monkeypatch.setattr(baseline, "generate_greedy_pipelined", fail)
    monkeypatch.setenv("LAB_ARM_PROCESS", "shared")  # the failure is patched into this process
    rows, _ = run_profile(registry, "", max_tokens=4)
    assert rows[0]["status"] == "oom" and "malloc" in rows[0]["detail"]


def test_a_pause_holds_the_engine_thread_between_steps_only_where_nothing_is_in_flight(registry: Registry) -> None:
    import threading

    from lab.base.events import Held, TokenEvent
    from lab.runner import RunControl

    arms = """
[[arms]]
name = "dflash"
backend = "mlx-dflash"
model = "tiny:qwen3"
n_max = 3
options = { draft = "tiny:qwen3-dflash" }
"""
    profile = parse_profile(PROFILE.format(arms=arms, max_tokens=32, temperature=0.0), "<test>", registry)
    control = RunControl()
    events: list[Any] = []
    seen = {"baseline": 0, "dflash": 0}

    def listen(event: Any) -> None:
        events.append(event)
        if isinstance(event, TokenEvent):
            seen[event.cell.arm] += 1
            if seen[event.cell.arm] == 3:  # pause both arms a few tokens in
                control.pause()
        elif isinstance(event, Held) and event.seconds is None:
            threading.Timer(0.3, control.resume).start()

    rows = {r["arm"]: r for r in Runner(profile, registry, listeners=[listen], control=control).run()}
    held = [e for e in events if isinstance(e, Held) and e.seconds is not None]
    # the pipelined greedy baseline waits for its next cell (there is none:
    # the hold comes before dflash's cell); the DFlash loop holds mid-cell
    assert [(e.cell.arm, e.in_cell) for e in held] == [("dflash", False), ("dflash", True)]
    assert rows["dflash"]["engine_report"]["paused_s"] == held[1].seconds >= 0.25
    assert "paused_s" not in rows["baseline"]["engine_report"]
    assert rows["dflash"]["identical_to_baseline"] is True


class _RecordingTarget:
    """What the MLX probe drives, recording the width of every pass."""

    n_ctx = 1024

    def __init__(self) -> None:
        self.widths: list[int] = []
        self.n_past = 0

        class _Vocab:
            @staticmethod
            def encode(text: str, add_special: bool = False) -> list[int]:
                return list(range(len(text.split())))

        self.vocab = _Vocab()

    def set_sampling(self, *_a: Any) -> None:
        pass

    def reset(self) -> None:
        self.n_past = 0

    def decode(self, ids: Any, all_logits: bool) -> None:
        self.widths.append(len(ids))
        self.n_past += len(ids)

    def truncate(self, n_keep: int) -> None:
        self.n_past = n_keep


def test_the_mlx_probe_times_each_widths_passes_back_to_back_after_untimed_ones() -> None:
    from lab_mlx import probe

    target = _RecordingTarget()
    got = probe.decode_pass_seconds(target, (1, 3, 5), inner=4)  # type: ignore[arg-type]
    assert len(got) == 3 and all(s >= 0 for s in got)
    passes = target.widths[1:]  # after the prefix
    per_width = probe.WARM_PASSES + 4
    # one width at a time, never cycling: a graph cache of bounded size keeps each width's captures
    assert passes == [1] * per_width + [3] * per_width + [5] * per_width
    target = _RecordingTarget()
    probe.decode_pass_seconds(target, (1, 3), inner=2, order="interleaved")  # type: ignore[arg-type]
    assert target.widths[1:] == [1, 3, 1, 3, 1, 3]
    with pytest.raises(ValueError, match="probe order"):
        probe.decode_pass_seconds(_RecordingTarget(), (1,), order="random")  # type: ignore[arg-type]
