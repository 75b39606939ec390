"""The device run's profiles: they pass the lab's checks, they ask for what
the H200 run needs (every layer offloaded, the oracle at three acceptance
levels x four n_max values, the synthetic drafts, the server arms), and the
same profiles at tiny synthetic shapes run through the lab on this CPU with
the oracle holding its acceptance (llama.cpp's CPU backend runs the same
code paths; only the weights' shapes and n_gpu_layers' effect differ)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lab.profile.load import check_profile, parse_profile
from lab.registry import load_registry

ROOT = Path(__file__).resolve().parent.parent
ORACLE = ROOT / "profiles" / "h200-oracle.toml"
DRAFT = ROOT / "profiles" / "h200-draft.toml"


def test_the_oracle_profile_sweeps_acceptance_and_n_max_on_the_gpu() -> None:
    profile = check_profile(str(ORACLE), load_registry())
    oracle = [a for a in profile.arms if a.drafter == "oracle"]
    # per-token acceptance 1 - error_rate: 0.5, 0.7, 0.9
    grid = {(a.drafter_options["error_rate"], a.n_max) for a in oracle}
    assert grid == {(e, n) for e in (0.5, 0.3, 0.1) for n in (2, 4, 8, 16)}
    assert all(a.model == "synthetic:llama-8b" and a.options["n_gpu_layers"] == 999 for a in profile.arms)
    assert (profile.run.max_tokens, profile.run.rounds) == (256, 2)


def test_the_draft_profile_offloads_drafts_in_process_and_on_the_server() -> None:
    profile = check_profile(str(DRAFT), load_registry())
    drafts = {a.drafter_options.get("model") for a in profile.arms if a.drafter == "draft-model"}
    assert drafts == {"synthetic:llama-1b", "synthetic:llama-1b-a70"}
    server = {a.options.get("draft_model") for a in profile.arms if a.backend == "llamacpp-server" and a.n_max}
    assert server == {"synthetic:llama-1b", "synthetic:llama-1b-a70", "synthetic:llama-8b"}
    assert all(a.options["n_gpu_layers"] == 999 for a in profile.arms)
    # in process, a draft model takes its arm's n_gpu_layers unless it names its own
    assert all("n_gpu_layers" not in a.drafter_options for a in profile.arms)



def test_the_streams_profile_prices_each_level_on_the_server_at_a_set_acceptance() -> None:
    profile = check_profile(str(ROOT / "profiles" / "h200-server-streams.toml"), load_registry())
    levels = sorted({a.options.get("concurrency") or 1 for a in profile.arms})
    assert levels == [1, 4, 8]
    assert all(a.backend == "llamacpp-server" and a.options["n_gpu_layers"] == 999 for a in profile.arms)
    drafted = [a for a in profile.arms if a.n_max]
    assert drafted and all(a.acceptance is not None and a.options["draft_model"] == "synthetic:llama-1b" for a in drafted)

def tiny(text: str) -> str:
    """A device profile at CPU size: tiny synthetic models, short outputs,
    one round, the llama.cpp arms only."""
    text = text.replace("synthetic:llama-8b", "synthetic:tiny")
    text = re.sub(r"synthetic:llama-1b(-a70)?", "synthetic:tiny-draft", text)
    text = text.replace("max_tokens = 256", "max_tokens = 24").replace("rounds = 2", "rounds = 1")
    text = text.replace("warmup = 1", "warmup = 0").replace("n_max = [2, 4, 8, 16]", "n_max = [2, 8]")
    blocks = text.split("[[arms]]")
    return "[[arms]]".join([blocks[0]] + [b for b in blocks[1:] if 'backend = "llamacpp"\n' in b])


@pytest.mark.engine
def test_the_oracle_profile_at_tiny_shapes_runs_and_orders_acceptance(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[llamacpp]')")
    pytest.importorskip("gguf", reason="gguf is not installed (pip install -e '.[llamacpp]')")
    from lab.runner import Runner

    registry = load_registry()
    text = tiny(ORACLE.read_text())
    text = text.replace("[run]\n", "[run]\nprobe = false\n") if "probe" in _run_keys() else text
    profile = parse_profile(text, str(tmp_path / "h200-oracle-tiny.toml"), registry)
    rows = Runner(profile, registry).run()
    assert all(r["status"] == "ok" for r in rows), [(r["arm"], r["detail"]) for r in rows if r["status"] != "ok"]
    by_level: dict[str, list[float]] = {}
    for r in rows:
        if r["drafter"] == "oracle":
            by_level.setdefault(r["arm"].split("-")[1], []).append(r["acceptance_rate"])
        assert r["gpu_energy_j"] is None  # no GPU here: the telemetry keys stay null
    assert set(by_level) == {"a90", "a70", "a50"}
    # per-token acceptance 0.9 against 0.5: far apart over every arm's drafts
    assert sum(by_level["a90"]) > sum(by_level["a50"])


def _run_keys() -> set[str]:
    import dataclasses

    from lab.base.profile import RunSettings

    return {f.name for f in dataclasses.fields(RunSettings)}
