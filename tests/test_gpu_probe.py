"""The probe as a GPU run needs it: each width's passes timed back to back
(llama.cpp's CUDA graphs are replayed only while the batch shape stays), and
`lab probe` loading the target with the backend's options (GPU layers...)
from the command line or a profile arm."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lab.probing.target import ProbeTargetError, resolve
from lab.registry import load_registry


class RecordingContext:
    """The slice of engine.Context the probe drives; it records the width of
    every timed-or-not verify pass after the prefix."""

    n_ctx = 4096

    def __init__(self) -> None:
        self.model = self
        self.n_past = 0
        self.passes: list[int] = []
        self.prefixed = False

    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        return list(range(len(text.split())))

    def reset(self) -> None:
        self.n_past = 0

    def decode(self, ids: list[int], logits: str) -> None:
        if logits == "all":
            self.passes.append(len(ids))
        self.n_past += len(ids)

    def truncate(self, n_keep: int) -> None:
        self.n_past = min(self.n_past, n_keep)


def test_consecutive_probe_times_each_width_back_to_back() -> None:
    from lab_llamacpp import probe

    ctx = RecordingContext()
    got = probe.decode_pass_seconds(ctx, (1, 2, 4), inner=3)  # type: ignore[arg-type]
    assert len(got) == 3
    per_width = probe.WARM_PASSES + 3
    assert ctx.passes == [1] * per_width + [2] * per_width + [4] * per_width
    assert ctx.n_past == 0  # reset after


def test_interleaved_order_cycles_through_the_widths() -> None:
    from lab_llamacpp import probe

    ctx = RecordingContext()
    probe.decode_pass_seconds(ctx, (1, 2, 4), inner=2, order="interleaved")  # type: ignore[arg-type]
    assert ctx.passes == [1, 2, 4] * 3
    with pytest.raises(ValueError, match="order"):
        probe.decode_pass_seconds(ctx, (1,), order="shuffled")  # type: ignore[arg-type]


def test_decode_methods_are_declared_with_consecutive_first() -> None:
    from lab_llamacpp.backend import LlamaCppBackend

    assert LlamaCppBackend.probe_methods[0] == "decode"  # what a run's own probe uses
    assert "decode-interleaved" in LlamaCppBackend.probe_methods


PROFILE = """
[run]
threads = 2

[[prompts]]
name = "p"
text = "hello"

[[arms]]
name = "base"
backend = "llamacpp"
model = "embedded:smollm2"
options = { n_gpu_layers = 999 }

[[arms]]
name = "oracle"
backend = "llamacpp"
model = "synthetic:tiny"
drafter = "ngram"
n_max = 4
options = { n_gpu_layers = 999, batch_invariant = true }
"""


def test_probe_target_from_a_profile_arm_and_the_command_line(tmp_path: Path) -> None:
    registry = load_registry()
    path = tmp_path / "gpu.toml"
    path.write_text(PROFILE)
    t = resolve(registry, profile=str(path))
    # the first speculative arm: the stack the run's prediction needs
    assert (t.backend, t.model, dict(t.options), t.threads) == (
        "llamacpp", "synthetic:tiny", {"n_gpu_layers": 999, "batch_invariant": True}, 2)
    assert "arm oracle" in t.source
    t = resolve(registry, profile=str(path), arm="base", options=["n_gpu_layers=0", "gpu_pick=on"], threads=4)
    assert (t.model, dict(t.options), t.threads) == ("embedded:smollm2", {"n_gpu_layers": 0, "gpu_pick": "on"}, 4)
    plain = resolve(registry, options=["batch_invariant=false", "n_batch=64"])
    assert (plain.backend, plain.model, dict(plain.options)) == (
        "llamacpp", "embedded:smollm2", {"batch_invariant": False, "n_batch": 64})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"options": ["n_gpu_layer=9"]}, "has no option 'n_gpu_layer'"),
        ({"options": ["n_gpu_layers=lots"]}, "n_gpu_layers wants a int"),
        ({"options": ["gpu_pick=maybe"]}, "gpu_pick is one of"),
        ({"options": ["n_gpu_layers=-5"]}, "at least -1"),
        ({"options": ["n_gpu_layers"]}, "KEY=VALUE"),
        ({"arm": "base"}, "give the profile too"),
    ],
)
def test_probe_target_refuses_bad_options(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ProbeTargetError, match=message):
        resolve(load_registry(), **kwargs)


def test_probe_target_names_a_missing_arm(tmp_path: Path) -> None:
    path = tmp_path / "gpu.toml"
    path.write_text(PROFILE)
    with pytest.raises(ProbeTargetError, match="no arm 'nope'.*base, oracle"):
        resolve(load_registry(), profile=str(path), arm="nope")


def test_lab_probe_rejects_an_unknown_option_without_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    from lab.cli import main

    assert main(["probe", "--option", "n_gpu_layer=9", "--quiet", "--no-bandwidth"]) == 2
    err = capsys.readouterr().err
    assert "n_gpu_layer" in err and "Traceback" not in err


@pytest.mark.engine
def test_lab_probe_loads_the_target_with_its_options(tmp_path: Path) -> None:
    """A real probe on a tiny synthetic model, with the GPU pick forced on
    (llama.cpp's CPU backend runs the sampler graph too): the saved probe
    says how its passes were ordered and how the target was loaded."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[llamacpp]')")
    pytest.importorskip("gguf", reason="gguf is not installed (pip install -e '.[llamacpp]')")
    from lab.cli import main

    out = tmp_path / "probe.json"
    rc = main(["probe", "--model", "synthetic:tiny", "--widths", "1,2,5", "--repeats", "1", "--no-bandwidth",
               "--quiet", "--n-gpu-layers", "0", "--option", "gpu_pick=on", "--out", str(out)])
    assert rc == 0
    saved = json.loads(out.read_text())
    assert saved["widths"] == [1, 2, 5] and saved["method"] == "decode"
    assert saved["notes"]["order"] == "consecutive"
    assert saved["notes"]["gpu_pick"] is True and saved["notes"]["n_gpu_layers"] == 0
    assert all(s > 0 for s in saved["seconds"][0])


@pytest.mark.engine
def test_a_gpu_probe_prices_one_row_as_the_baseline_decodes_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where drafting arms pick on the device and a baseline on the host
    (gpu_pick auto on a GPU), T(1) is timed with no sampler in the graph
    and the wider passes with it. On this CPU the split is forced: the arm
    is loaded with gpu_pick on and told that its one-row decodes pick on
    the host, as auto decides on a GPU."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[llamacpp]')")
    pytest.importorskip("gguf", reason="gguf is not installed (pip install -e '.[llamacpp]')")
    from lab_llamacpp import gpu_pick, probe
    from lab_llamacpp.backend import LlamaCppBackend

    from lab.api import BackendContext
    from lab.base.profile import Arm, RunSettings

    arm = Arm(name="probe", backend="llamacpp", model="synthetic:tiny", drafter=None, n_max=None,
              options={"gpu_pick": "on"}, drafter_options={}, baseline=None, is_baseline=True,
              stack="llamacpp", group="probe")
    backend = LlamaCppBackend(arm, BackendContext(run=RunSettings(threads=2, n_ctx=1024), run_dir=str(tmp_path),
                                                  log=lambda _t: None))
    backend.load(lambda _e: None)
    try:
        assert backend.gpu_pick_verifies and backend.gpu_pick_one_row
        backend.gpu_pick_one_row = False
        seen: list[tuple[tuple[int, ...], bool]] = []
        timed = probe.decode_pass_seconds

        def spy(ctx: Any, widths: Any, **kw: Any) -> list[float]:
            seen.append((tuple(widths), ctx in gpu_pick._installed))
            return timed(ctx, widths, **kw)

        monkeypatch.setattr(probe, "decode_pass_seconds", spy)
        seconds = backend.measure_verify_cost([1, 2, 5])
        assert len(seconds) == 3 and all(s > 0 for s in seconds)
        assert seen == [((1,), False), ((2, 5), True)]
        assert backend.probe_notes()["one_row_pick"] == "host"
    finally:
        backend.close()
