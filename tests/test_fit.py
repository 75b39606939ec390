"""Arms held to the memory where they run, before anything loads
(lab.profile.fit, `lab check`, `lab run` and its --force): the numbers, and
what would fit, each alternative computed by estimating the arm again."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lab.base.footprint import MIB
from lab.profile.fit import check_fit, estimate_arm, explain_arm
from lab.profile.load import parse_profile
from lab.telemetry.budget import Budget

ROOT = Path(__file__).resolve().parents[1]
HEAD = '[run]\nmax_tokens = 16\nn_ctx = 4096\n\n[[prompts]]\nname = "p"\ntext = "hi"\n'
BASE = '\n[[arms]]\nname = "base"\nbackend = "llamacpp"\nmodel = "embedded:smollm2"\n'
DRAFT = ('\n[[arms]]\nname = "draft"\nbackend = "llamacpp"\nmodel = "embedded:smollm2"\ndrafter = "draft-model"\n'
         'n_max = 6\ndrafter_options = { model = "embedded:smollm2" }\n')
# a server with 64 slots of a million-token context each: 64 Mi cells of SmolLM2's 22.5 KiB
TOO_BIG = ('\n[[arms]]\nname = "huge"\nbackend = "llamacpp-server"\nmodel = "embedded:smollm2"\n'
           'options = { ctx_size = 1048576, concurrency = 64 }\n')


def profile(text: str, registry: Any) -> Any:
    return parse_profile(HEAD + text, "t.toml", registry)


def budget_of(size: int) -> Any:
    return lambda where: Budget(where, size, "a test's budget", total=size)


def test_an_arm_is_estimated_from_its_backend_and_its_files(registry: Any) -> None:
    p = profile(BASE, registry)
    got = estimate_arm(p.arms[0], p.run, registry)
    assert got is not None and got.where == "cpu", explain_arm(p.arms[0], p.run, registry)
    assert got.part("KV cache").bytes == 90 * MIB  # type: ignore[union-attr]
    assert got.part("weights").bytes == read_weight_bytes()  # type: ignore[union-attr]
    assert got.total == sum(part.bytes for part in got.parts)


def read_weight_bytes() -> int:
    from lab.kit import models
    from lab.kit.model_shape import read_shape

    return read_shape(models.embedded_smollm2()).weight_bytes


def test_an_arm_that_does_not_fit_is_refused_with_the_numbers_and_what_would(registry: Any) -> None:
    p = profile(DRAFT, registry)
    full = estimate_arm(p.arms[0], p.run, registry)
    assert full is not None
    room = full.total - 100 * MIB
    fits = check_fit(p, registry, budget_of(room))
    assert [f.fits for f in fits] == [False]
    text = fits[0].refusal()
    assert "arm draft will not fit" in text and "100 MiB more than" in text and "a test's budget" in text
    assert "KV cache 90 MiB" in text and "draft: KV cache 90 MiB" in text
    # each alternative is an estimate that fits, not advice
    ctx = next(w for w in fits[0].would_fit if w.startswith("[run] n_ctx = "))
    n_ctx = int(ctx.split()[3].rstrip(":"))
    assert n_ctx % 256 == 0 and 512 <= n_ctx < 4096
    smaller = parse_profile(HEAD.replace("n_ctx = 4096", f"n_ctx = {n_ctx}") + DRAFT, "t.toml", registry)
    assert estimate_arm(smaller.arms[0], smaller.run, registry).total <= room  # type: ignore[union-attr]
    bigger = parse_profile(HEAD.replace("n_ctx = 4096", f"n_ctx = {n_ctx + 256}") + DRAFT, "t.toml", registry)
    assert estimate_arm(bigger.arms[0], bigger.run, registry).total > room  # type: ignore[union-attr]
    # the draft is Q4_1 with a Q8_0 embedding (5.7 bits a weight): 100 MiB is more than a 4-bit one saves
    assert not any(w.startswith("a 4-bit draft") for w in fits[0].would_fit), fits[0].would_fit
    short = check_fit(p, registry, budget_of(full.total - 10 * MIB))[0]
    assert any(w.startswith("a 4-bit draft (Q4_K_M, about 78 MiB instead of 92 MiB at 5.7 bits") for w in short.would_fit), \
        short.would_fit


def test_a_smaller_n_max_is_offered_where_the_width_is_what_does_not_fit(registry: Any) -> None:
    """On llama-server a hybrid target keeps n_max rollback snapshots of its
    recurrent state: n-max 12 needs more than n-max 3."""
    arm = ('\n[[arms]]\nname = "dflash"\nbackend = "llamacpp-dflash"\nmodel = "synthetic:qwen35-tiny"\n'
           'n_max = 12\noptions = { draft_model = "synthetic:qwen35-tiny-dflash" }\n')
    from lab.kit import models

    models.resolve("synthetic:qwen35-tiny")
    models.resolve("synthetic:qwen35-tiny-dflash")
    p = profile(arm, registry)
    wide = explain_arm(p.arms[0], p.run, registry)
    narrow = explain_arm(p.arms[0].__class__(**{**p.arms[0].__dict__, "n_max": 3}), p.run, registry)
    assert not isinstance(wide, str) and not isinstance(narrow, str)
    snapshots = wide.part("recurrent state").bytes / narrow.part("recurrent state").bytes  # type: ignore[union-attr]
    assert snapshots == pytest.approx(13 / 4)
    fits = check_fit(p, registry, budget_of(narrow.total + (wide.total - narrow.total) // 2))
    assert fits[0].fits is False
    offered = [w for w in fits[0].would_fit if w.startswith("n_max = ")]
    assert offered and 3 <= int(offered[0].split()[2]) < 12


def test_an_arm_without_an_estimate_says_why_and_is_not_refused(registry: Any, tmp_path: Path) -> None:
    fits = check_fit(profile('\n[[arms]]\nname = "b"\nbackend = "llamacpp-server"\noptions = { url = '
                             '"http://127.0.0.1:9" }\n', registry), registry, budget_of(1))
    assert fits[0].estimate is None and fits[0].fits is None
    assert "does not say" in fits[0].lines()[0]


def lab(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lab.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env={**os.environ, **(env or {})})


@pytest.mark.slow
def test_lab_check_refuses_an_arm_that_cannot_fit_with_the_numbers(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text(HEAD + BASE + TOO_BIG)
    got = lab("check", "p.toml", cwd=tmp_path)
    assert got.returncode == 1, got.stdout + got.stderr
    assert "huge (cpu):" in got.stdout and "DOES NOT FIT" in got.stdout
    assert "base (cpu):" in got.stdout and ": fits" in got.stdout
    # 64 slots x 1 Mi cells x 22.5 KiB of SmolLM2's K and V
    assert re.search(r"arm huge will not fit: it needs 1[45]\d\d\.\d GiB on cpu \(KV cache 1440\.0 GiB", got.stderr), got.stderr
    assert "available RAM" in got.stderr
    # a context that fits, per stream as [run] n_ctx is, the arm's own ctx_size given up
    assert re.search(r"would fit: \[run\] n_ctx = \d+ \(instead of the arm's ctx_size\)", got.stderr), got.stderr
    assert "`lab run --force` tries anyway" in got.stderr and "Traceback" not in got.stderr


@pytest.mark.slow
def test_lab_run_refuses_it_before_anything_loads(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text(HEAD + BASE + TOO_BIG)
    got = lab("run", "p.toml", "--out", "runs", cwd=tmp_path)
    assert got.returncode == 2, got.stdout + got.stderr
    assert "nothing was run" in got.stderr and "arm huge will not fit" in got.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
@pytest.mark.engine
def test_lab_run_force_tries_anyway_and_the_arm_ends_as_a_result(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text(HEAD.replace("max_tokens = 16", "max_tokens = 4\nrounds = 1\nwarmup = 0\n"
                                                  "probe = false") + TOO_BIG.replace("huge", "base"))
    got = lab("run", "p.toml", "--out", "runs", "--force", "--quiet", cwd=tmp_path)
    assert "--force: running 1 arm(s) expected not to fit" in got.stderr, got.stderr
    # the server could not allocate its cache: a failed row, saved, not a crash of the lab
    assert got.returncode == 3, got.stdout + got.stderr
    assert "Traceback" not in got.stderr
    run_dir = next((tmp_path / "runs").iterdir())
    import json

    rows = json.loads((run_dir / "results.json").read_text())["results"]
    assert {r["status"] for r in rows} <= {"oom", "error"}


@pytest.mark.slow
def test_check_builds_no_built_in_model_to_estimate_it(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    (tmp_path / "p.toml").write_text(HEAD + '\n[[arms]]\nname = "t"\nbackend = "llamacpp"\nmodel = "tiny:llama"\n')
    got = lab("check", "p.toml", cwd=tmp_path, env={"LAB_CACHE_DIR": str(cache)})
    assert got.returncode == 0, got.stdout + got.stderr
    assert "t: not estimated: model 'tiny:llama' is not built yet" in got.stdout
    assert not any(p.suffix == ".gguf" for p in cache.rglob("*"))
