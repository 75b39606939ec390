"""Rival plugins: an installed distribution whose entry points register names
the built-ins have. Whatever the entry point's name (sorting before or after
the built-ins'), the newcomer is the listed load error, whole, and the
built-ins stay whole; strict mode and `lab run` say so in a line."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lab.registry import load_registry

BUILTIN_DRAFTERS = {"ngram", "oracle", "draft-model"}
BUILTIN_BACKENDS = {"llamacpp", "llamacpp-server", "mlx"}


def install(root: Path, dist: str, entry_points: str, modules: dict[str, str]) -> None:
    """A distribution installed into ``root`` (a dist-info with its entry
    points beside its modules): importlib.metadata finds it on sys.path as
    it finds anything pip installed."""
    info = root / f"{dist}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    for mod, src in modules.items():
        (root / f"{mod}.py").write_text(textwrap.dedent(src))


def rival_drafters(*names: str) -> str:
    classes = "".join(
        f'''
class D{i}(Drafter):
    name = {n!r}
    description = "a rival"

    def draft(self, context, k):
        return Draft(())
'''
        for i, n in enumerate(names)
    )
    regs = "".join(f"    register(D{i})\n" for i in range(len(names)))
    return (
        "from lab.api import Draft, Drafter\nfrom lab.hookspecs import hookimpl\n" + classes
        + "\n\n@hookimpl\ndef lab_register_drafters(register):\n" + regs
    )


RIVAL_BACKEND = '''
from lab_llamacpp.backend import LlamaCppBackend
from lab.hookspecs import hookimpl


class Rival(LlamaCppBackend):
    description = "a rival llamacpp"


class Extra(LlamaCppBackend):
    name = "rival-extra"


@hookimpl
def lab_register_backends(register):
    register(Extra)
    register(Rival)
'''


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.delenv("LAB_PLUGINS_STRICT", raising=False)
    monkeypatch.delenv("LAB_BLOCK_PLUGINS", raising=False)
    return root


@pytest.mark.parametrize("ep_name", ["aaa", "builtin", "zzz", "0-first", "Builtin"])
def test_a_rival_drafter_name_is_the_newcomers_load_error_whatever_its_entry_point(site: Path, ep_name: str) -> None:
    install(site, "lab_rival", f"[lab.drafters]\n{ep_name} = lab_rival_mod\n",
            {"lab_rival_mod": rival_drafters("rival-own", "ngram")})
    reg = load_registry()
    assert BUILTIN_DRAFTERS <= set(reg.drafters), reg.errors
    assert reg.drafters["ngram"].__module__ == "lab_drafters.ngram"
    errors = [e for e in reg.errors if "lab_rival" in e.traceback or "ngram" in e.error]
    assert len(errors) == 1, reg.errors
    assert "'ngram' is already registered" in errors[0].error
    # the built-in owner is named, and the rival is refused whole
    assert "builtin" in errors[0].error
    assert "rival-own" not in reg.drafters
    assert not [e for e in reg.errors if e.entry_point == "builtin" and e.group == "lab.drafters" and ep_name != "builtin"]


@pytest.mark.parametrize("ep_name", ["aaa", "llamacpp", "zzz"])
def test_a_rival_backend_name_is_refused_and_the_builtin_backends_stay(site: Path, ep_name: str) -> None:
    install(site, "lab_rival_backend", f"[lab.backends]\n{ep_name} = lab_rival_backend_mod\n",
            {"lab_rival_backend_mod": RIVAL_BACKEND})
    reg = load_registry()
    assert BUILTIN_BACKENDS <= set(reg.backends), reg.errors
    assert reg.backends["llamacpp"].__module__ == "lab_llamacpp.backend"
    assert "rival-extra" not in reg.backends
    failed = [e for e in reg.errors if "backend name 'llamacpp' is already registered" in e.error]
    assert len(failed) == 1, reg.errors
    # its hooks are gone too: a refused plugin adds no doctor checks
    assert reg._pm is not None
    assert all(impl.plugin_name != failed[0].entry_point for impl in reg._pm.hook.lab_register_backends.get_hookimpls())


def test_two_rivals_the_later_is_refused_and_the_first_keeps_its_name(site: Path) -> None:
    install(site, "lab_rivals", "[lab.drafters]\nb-second = lab_rival_b\na-first = lab_rival_a\n",
            {"lab_rival_a": rival_drafters("shared-name"), "lab_rival_b": rival_drafters("shared-name", "b-own")})
    reg = load_registry()
    assert reg.drafters["shared-name"].__module__ == "lab_rival_a"
    assert "b-own" not in reg.drafters
    assert [e.entry_point for e in reg.errors if "shared-name" in e.error] == ["b-second"]
    assert "a-first" in next(e.error for e in reg.errors if e.entry_point == "b-second")


def _lab(args: list[str], site: Path, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "PYTHONPATH": str(site), **env}
    environ.pop("LAB_BLOCK_PLUGINS", None)
    return subprocess.run([sys.executable, "-m", "lab.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=environ)


BAD_PROFILE = """[profile]
name = "x"

[[prompts]]
name = "p"
text = "t"

[[arms]]
name = "a"
backend = "nope"
model = "embedded:smollm2"
"""


@pytest.mark.slow
def test_strict_mode_ends_in_a_message_and_lab_run_names_load_errors(site: Path, tmp_path: Path) -> None:
    install(site, "lab_rival", "[lab.drafters]\naaa = lab_rival_mod\nbroken = lab_missing_module\n",
            {"lab_rival_mod": rival_drafters("ngram")})
    (tmp_path / "p.toml").write_text(BAD_PROFILE)
    strict = _lab(["run", "p.toml"], site, tmp_path, LAB_PLUGINS_STRICT="1")
    assert strict.returncode == 2, strict.stderr
    assert "Traceback" not in strict.stderr
    assert "aaa" in strict.stderr and "LAB_PLUGINS_STRICT" in strict.stderr
    plugins = _lab(["plugins"], site, tmp_path, LAB_PLUGINS_STRICT="1")
    assert plugins.returncode == 2 and "Traceback" not in plugins.stderr
    # without strict mode: one line names every plugin that did not load,
    # then the run goes on to its own checks (this profile is refused)
    run = _lab(["run", "p.toml"], site, tmp_path)
    assert run.returncode == 2, run.stderr
    lines = [line for line in run.stderr.splitlines() if "plugins not loaded" in line]
    assert len(lines) == 1, run.stderr
    assert "aaa" in lines[0] and "broken" in lines[0]
    assert "p.toml" in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "runs").exists()
