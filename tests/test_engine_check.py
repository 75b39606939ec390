"""Engines are checked before anything runs: a profile whose arm needs an
engine that does not import is refused by ``lab check`` (non-zero, naming
the engine and the install command) and by ``lab run`` within seconds, with
nothing measured or saved; SIGTERM at any moment of such a run ends it
within seconds and leaves no process behind. A missing engine is made the
way a broken install looks: a package of the engine's name, first on
PYTHONPATH, that fails to import."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping

import pytest

from lab.api import Backend, MissingEngine
from lab.kit import mlx_platform
from lab.profile.engines import missing_engines
from lab.profile.load import parse_profile
from lab.registry import Registry

PROFILE = """
[profile]
name = "needs-mlx"
[run]
max_tokens = 8
rounds = 1
[[prompts]]
name = "p"
text = "hello"
[[arms]]
name = "baseline"
backend = "mlx"
model = "tiny:qwen3"
[[arms]]
name = "ngram"
backend = "mlx"
model = "tiny:qwen3"
drafter = "ngram"
n_max = 3
"""


def _shadow(root: Path, body: str) -> Path:
    """A directory holding a package ``mlx`` whose import runs ``body``."""
    pkg = root / "shadow" / "mlx"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(body, encoding="utf-8")
    return root / "shadow"


def _env(shadow: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(shadow), os.environ.get("PYTHONPATH", "")])}


def _lab(args: list[str], cwd: Path, env: Mapping[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "lab.cli", *args], cwd=cwd, env=dict(env), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.fixture
def broken_mlx(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    (tmp_path / "p.toml").write_text(PROFILE, encoding="utf-8")
    shadow = _shadow(tmp_path, 'raise ImportError("No module named \'mlx\'")\n')
    return tmp_path, _env(shadow)


def test_check_names_the_engine_and_the_install_command(broken_mlx: tuple[Path, dict[str, str]]) -> None:
    cwd, env = broken_mlx
    proc = _lab(["check", "p.toml"], cwd, env)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode != 0, out + err
    assert "engine mlx cannot load" in err
    assert "No module named 'mlx'" in err
    assert mlx_platform.install_line() in err
    # the two arms share one engine: one problem naming both, at the first one's backend line
    line = next(i for i, text in enumerate(PROFILE.splitlines(), start=1) if text == 'backend = "mlx"')
    assert f"p.toml:{line}: [arms[0].backend] arms baseline, ngram (backend mlx)" in err


def test_run_is_refused_at_once_and_measures_nothing(broken_mlx: tuple[Path, dict[str, str]]) -> None:
    cwd, env = broken_mlx
    t0 = time.monotonic()
    proc = _lab(["run", "p.toml", "--out", "runs"], cwd, env)
    out, err = proc.communicate(timeout=120)
    took = time.monotonic() - t0
    assert proc.returncode == 2, out + err
    assert "engine mlx cannot load" in err and mlx_platform.install_line() in err
    assert "nothing was run" in err
    assert "measuring verify cost" not in err
    assert not (cwd / "runs").exists() or not any((cwd / "runs").iterdir())
    # an import that fails at once is refused in seconds, not after a probe's timeout
    assert took < 60, took


@pytest.mark.parametrize("when", ["before", "during"])
def test_sigterm_ends_a_refused_run_within_seconds(tmp_path: Path, when: str) -> None:
    """``during``: the engine's import hangs (the child that tries it writes
    its pid, then sleeps); SIGTERM ends the run and that child with it."""
    (tmp_path / "p.toml").write_text(PROFILE, encoding="utf-8")
    pid_file = tmp_path / "import.pid"
    shadow = _shadow(tmp_path, f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
                               "time.sleep(300)\nraise ImportError('never')\n")
    proc = _lab(["run", "p.toml", "--out", "runs"], tmp_path, _env(shadow))
    if when == "during":
        deadline = time.monotonic() + 120
        while not pid_file.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert pid_file.exists(), "the engine check never tried the import"
        time.sleep(0.2)
    else:
        time.sleep(0.3)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"lab run was still running 20 s after SIGTERM ({when} the engine check)")
    assert time.monotonic() - sent < 20
    assert proc.returncode != 0
    if when == "during":
        child = int(pid_file.read_text())
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child), "the import child outlived the run"


def test_sigterm_after_the_refusal_finds_the_run_ended(broken_mlx: tuple[Path, dict[str, str]]) -> None:
    cwd, env = broken_mlx
    proc = _lab(["run", "p.toml", "--out", "runs"], cwd, env)
    proc.communicate(timeout=120)
    assert proc.returncode == 2
    proc.send_signal(signal.SIGTERM)  # nothing left to stop: no error, no process
    assert proc.poll() == 2


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie waits for its parent: it computes nothing
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return True


# -- the engine thread of MLX: a failed import raises, never waits ----------------

def test_mlx_engine_thread_raises_when_mlx_does_not_import(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hang behind a silent run: the engine thread died importing MLX
    and every call (the backend's close too) waited for it forever."""
    from lab_mlx.engine import EngineThread

    monkeypatch.setitem(sys.modules, "mlx", None)
    monkeypatch.setitem(sys.modules, "mlx.core", None)
    engine = EngineThread("t")
    t0 = time.monotonic()
    with pytest.raises(ImportError):
        engine.call(lambda: 1)
    assert time.monotonic() - t0 < 5
    assert not engine.started
    engine.close()


# -- the service: grouped per backend and answer, a plugin's bug named --------------

def _backend(name: str, missing: Any) -> type[Backend]:
    def missing_engine(cls: type, arm_options: Mapping[str, Any]) -> MissingEngine | None:
        if isinstance(missing, Exception):
            raise missing
        return missing

    return type(f"B_{name}", (Backend,), {
        "name": name, "stack": name, "load": lambda self, emit: None, "generate": lambda self, *a: None,
        "close": lambda self: None, "missing_engine": classmethod(missing_engine),
    })


def test_missing_engines_groups_arms_and_names_a_failing_check() -> None:
    reg = Registry()
    reg.backends["gone"] = _backend("gone", MissingEngine("gone-engine", "not installed", "bash scripts/setup.sh gone"))
    reg.backends["here"] = _backend("here", None)
    reg.backends["buggy"] = _backend("buggy", RuntimeError("oops"))
    text = "\n".join([
        "[[prompts]]", 'name = "p"', 'text = "x"',
        *[line for arm, be in (("a", "gone"), ("b", "here"), ("c", "gone"), ("d", "buggy"))
          for line in ("[[arms]]", f'name = "{arm}"', f'backend = "{be}"')],
    ])
    profile = parse_profile(text, "p.toml", reg)
    problems = missing_engines(profile, reg)
    assert [(p.arms, p.engine) for p in problems] == [(("a", "c"), "gone-engine"), (("d",), "buggy")]
    assert "install it with: bash scripts/setup.sh gone" in problems[0].line()
    assert "RuntimeError: oops" in problems[1].why
