"""The README's example drafter plugin runs through the lab's verify loop on
the real engine like any built-in drafter, and stays lossless."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from lab.profile.load import load_profile
from lab.registry import load_registry
from lab.runner import Runner

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "lab-bigram-drafter"


def load_example():
    spec = importlib.util.spec_from_file_location("lab_bigram", EXAMPLE / "lab_bigram.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["lab_bigram"] = module
    spec.loader.exec_module(module)
    return module


def test_example_registers_and_drafts() -> None:
    module = load_example()
    registry = load_registry(extra_plugins=[module])
    cls = registry.drafter("bigram")
    d = cls({}, None)  # type: ignore[arg-type]
    assert d.draft([5, 6, 7, 5], 3).tokens == (6, 7, 5)
    assert d.draft([1, 2, 3], 2).tokens == ()


@pytest.mark.slow
def test_example_runs_lossless_on_llamacpp(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    module = load_example()
    registry = load_registry(extra_plugins=[module])
    text = (EXAMPLE / "bigram.toml").read_text().replace("max_tokens = 200", "max_tokens = 40").replace("rounds = 2", "rounds = 1\nwarmup = 0\nthreads = 1\nprobe = false")
    (tmp_path / "p.toml").write_text(text)
    profile = load_profile(tmp_path / "p.toml", registry)
    rows = Runner(profile, registry).run()
    assert all(r["status"] == "ok" for r in rows), [r["detail"] for r in rows]
    spec = [r for r in rows if r["arm"].startswith("bigram")]
    assert len(spec) == 2 and all(r["identical_to_baseline"] for r in spec)
    assert all(r["steps"] and r["drafted"] >= r["accepted"] for r in spec)
