"""The memory estimate against what real runs on this machine measured:
llama.cpp in process (a draft model and n-gram arms beside the baseline),
llama-server (a self-draft), MLX (a draft model, and a GGUF read through
mx.load), on the embedded SmolLM2 and the project's tiny models.

Tiny models are mostly the process itself (the interpreter, numpy, the
engine's libraries, the lab): each backend declares that part as a constant
measured here at n_ctx 512 with a baseline arm. This run is at n_ctx 2048,
and its draft, n-gram and server self-draft arms were not part of that
measurement, so what moves with the model and the settings (weights,
repacked copies, KV caches, compute reserves, a second model) is what these
rows test. Every row must come within 15 % of its estimate, and the parts
llama-server logs for itself must match the estimate's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lab.analysis.memory_check import peak_checks
from lab.base.footprint import MIB
from lab.profile.fit import estimate_for_cell
from lab.profile.load import load_profile
from lab.store import load_run

pytestmark = [pytest.mark.engine, pytest.mark.slow]

PROFILE = """
[profile]
name = "memory-estimate"
[run]
max_tokens = 16
rounds = 1
warmup = 0
n_ctx = 2048
threads = 1
probe = false
[[prompts]]
name = "prose"
text = "Write a 300-word essay about why lighthouses still matter in the age of satellite navigation."
[[arms]]
name = "lc-base"
backend = "llamacpp"
model = "embedded:smollm2"
[[arms]]
name = "lc-draft"
backend = "llamacpp"
model = "embedded:smollm2"
drafter = "draft-model"
n_max = 4
drafter_options = { model = "embedded:smollm2-q4_0" }
[[arms]]
name = "lc-ngram"
backend = "llamacpp"
model = "embedded:smollm2"
drafter = "ngram"
n_max = 8
[[arms]]
name = "srv-base"
backend = "llamacpp-server"
model = "embedded:smollm2"
[[arms]]
name = "srv-self"
backend = "llamacpp-server"
model = "embedded:smollm2"
n_max = 4
options = { spec_type = "draft-simple", draft_model = "embedded:smollm2" }
[[arms]]
name = "mlx-base"
backend = "mlx"
model = "tiny:qwen3"
[[arms]]
name = "mlx-draft"
backend = "mlx"
model = "tiny:qwen3"
drafter = "draft-model"
n_max = 3
drafter_options = { model = "tiny:qwen3-draft" }
[[arms]]
name = "mlx-gguf"
backend = "mlx"
model = "embedded:smollm2"
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("llama_cpp", reason="llama.cpp is not installed here (bash scripts/setup.sh llamacpp)")
    pytest.importorskip("mlx.core", reason="MLX is not installed here (bash scripts/setup.sh mlx)")
    where = tmp_path_factory.mktemp("memory")
    (where / "p.toml").write_text(PROFILE, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "lab.cli", "run", "p.toml", "--out", "runs", "--quiet"], cwd=where,
                          capture_output=True, text=True, timeout=1200, env={**os.environ})
    assert done.returncode == 0, done.stdout + done.stderr
    return next((where / "runs").iterdir())


def test_every_rows_peak_is_within_15_percent_of_its_estimate(run_dir: Path, registry: Any) -> None:
    checks = peak_checks(load_run(run_dir), registry)
    table = "\n".join(f"{c.arm}: expected {c.expected} measured {c.measured} ({c.ratio}) {c.why}" for c in checks)
    assert {c.arm for c in checks} == {"lc-base", "lc-draft", "lc-ngram", "srv-base", "srv-self", "mlx-base",
                                       "mlx-draft", "mlx-gguf"}, table
    assert all(c.where == "cpu" and c.within for c in checks), table
    # the draft arms hold a second model: their estimate and their peak both exceed the baseline's
    by = {c.arm: c for c in checks}
    for arm, base in (("lc-draft", "lc-base"), ("srv-self", "srv-base")):
        assert by[arm].expected > by[base].expected + 80 * MIB  # type: ignore[operator]
        assert by[arm].measured > by[base].measured + 80 * MIB  # type: ignore[operator]


def test_the_report_sets_expected_beside_measured(run_dir: Path) -> None:
    report = (run_dir / "report.md").read_text(encoding="utf-8")
    section = report.split("## Memory: expected and measured", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in section.splitlines() if ln.startswith("| ") and not ln.startswith("| arm")]
    assert len(rows) == 8, section
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] == "cpu" and cells[2].endswith("MiB") and cells[3].endswith("MiB"), row
        assert 0.85 <= float(cells[4]) <= 1.15, row


def _logged(log: str, what: str) -> list[float]:
    return [float(m) for m in re.findall(rf"CPU(?:_Mapped)? {what} buffer size =\s+([\d.]+) MiB", log)]


def test_the_servers_own_buffers_match_the_parts(run_dir: Path, registry: Any) -> None:
    """llama-server logs the buffers it allocates: the model, the KV cache,
    the compute reserve, for the target and then for the draft."""
    profile = load_profile(run_dir / "profile.toml", registry)
    rows = json.loads((run_dir / "results.json").read_text())["results"]
    for name, models_ in (("srv-base", 1), ("srv-self", 2)):
        log = (run_dir / f"llama-server-{name}.log").read_text(errors="replace")
        row = next(r for r in rows if r["arm"] == name)
        got = estimate_for_cell(profile.arm(name), profile.run, registry, row["prompt_tokens"], row["n_tokens"])
        assert not isinstance(got, str), got
        weights = [p.bytes / MIB for p in got.parts if p.name.endswith("weights")]
        kv = [p.bytes / MIB for p in got.parts if p.name.endswith("KV cache")]
        compute = [p.bytes / MIB for p in got.parts if "compute" in p.name]
        assert _logged(log, "model") == pytest.approx(weights, abs=0.01) and len(weights) == models_
        assert _logged(log, "KV") == pytest.approx(kv, abs=0.01)
        assert _logged(log, "compute") == pytest.approx(compute, rel=0.15)
