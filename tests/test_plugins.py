"""Plugins load through real entry points; a broken one is listed, not fatal."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lab.registry import PluginLoadError, load_registry


def _install_fake_dist(root: Path, name: str, entry_points: str, modules: dict[str, str]) -> None:
    """A minimal installed distribution on sys.path: importlib.metadata finds
    its entry points exactly as it finds a pip-installed plugin's."""
    dist = root / f"{name}-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    for mod, src in modules.items():
        (root / f"{mod}.py").write_text(textwrap.dedent(src))


GOOD_PLUGIN = '''
    from lab.api import Draft, Drafter, Option
    from lab.hookspecs import hookimpl

    class RepeatLast(Drafter):
        name = "repeat-last"
        description = "proposes the last token k times"
        options = (Option("times", int, 1, "unused"),)

        def draft(self, context, k):
            return Draft(tuple([context[-1]] * k))

    @hookimpl
    def lab_register_drafters(register):
        register(RepeatLast)
'''


@pytest.fixture
def plugin_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_builtins_load_without_errors() -> None:
    reg = load_registry()
    assert "llamacpp" in reg.backends
    assert {"ngram", "oracle", "draft-model"} <= set(reg.drafters)
    assert not [e for e in reg.errors if e.entry_point in ("llamacpp", "builtin")]


def test_broken_entry_point_is_listed_and_others_load(plugin_path: Path) -> None:
    _install_fake_dist(
        plugin_path, "lab_thirdparty",
        """
        [lab.drafters]
        broken = lab_broken_plugin
        missing = lab_no_such_module
        raising = lab_raising_plugin
        good = lab_good_plugin
        """,
        {
            "lab_broken_plugin": "import definitely_not_installed_module\n",
            "lab_raising_plugin": '''
                from lab.hookspecs import hookimpl

                @hookimpl
                def lab_register_drafters(register):
                    raise RuntimeError("plugin bug")
            ''',
            "lab_good_plugin": GOOD_PLUGIN,
        },
    )
    reg = load_registry()
    failed = {e.entry_point: e.error for e in reg.errors}
    assert "ModuleNotFoundError" in failed["broken"]
    assert "ModuleNotFoundError" in failed["missing"]
    assert "plugin bug" in failed["raising"]
    assert "repeat-last" in reg.drafters
    assert {"ngram", "oracle", "draft-model"} <= set(reg.drafters)
    assert "llamacpp" in reg.backends
    with pytest.raises(KeyError, match="failed to load: .*broken"):
        reg.drafter("nope")


def test_strict_mode_makes_load_errors_fatal(plugin_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install_fake_dist(plugin_path, "lab_bad", "[lab.drafters]\nbad = lab_bad_plugin\n", {"lab_bad_plugin": "raise ImportError('nope')\n"})
    monkeypatch.setenv("LAB_PLUGINS_STRICT", "1")
    with pytest.raises(PluginLoadError, match="bad"):
        load_registry()


def test_blocked_plugins_are_skipped(plugin_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install_fake_dist(plugin_path, "lab_good", "[lab.drafters]\ngood = lab_good_plugin2\n", {"lab_good_plugin2": GOOD_PLUGIN})
    monkeypatch.setenv("LAB_BLOCK_PLUGINS", "good")
    assert "repeat-last" not in load_registry().drafters


def test_duplicate_names_are_a_load_error(plugin_path: Path) -> None:
    _install_fake_dist(
        plugin_path, "lab_dup", "[lab.drafters]\ndup = lab_dup_plugin\n",
        {"lab_dup_plugin": '''
            from lab.api import Draft, Drafter
            from lab.hookspecs import hookimpl

            class Ngram2(Drafter):
                name = "ngram"

                def draft(self, context, k):
                    return Draft(())

            @hookimpl
            def lab_register_drafters(register):
                register(Ngram2)
        '''},
    )
    reg = load_registry()
    assert any(e.entry_point == "dup" and "already registered" in e.error for e in reg.errors)
    assert reg.drafters["ngram"].__module__ == "lab_drafters.ngram"


@pytest.mark.slow
def test_lab_plugins_lists_load_errors(plugin_path: Path) -> None:
    _install_fake_dist(plugin_path, "lab_broken2", "[lab.backends]\nbroken2 = lab_broken2_mod\n", {"lab_broken2_mod": "1/0\n"})
    env_path = f"{plugin_path}"
    out = subprocess.run(
        [sys.executable, "-c", "import sys; from lab.cli import main; sys.exit(main(['plugins']))"],
        capture_output=True, text=True, env={**__import__('os').environ, "PYTHONPATH": env_path},
    )
    assert out.returncode == 0, out.stderr
    assert "load errors:" in out.stdout
    assert "broken2" in out.stdout and "ZeroDivisionError" in out.stdout
    assert "ngram" in out.stdout and "llamacpp" in out.stdout


MODELS_PLUGIN = '''
    from lab.hookspecs import hookimpl

    def _write(path):
        path.write_text("a model")

    @hookimpl
    def lab_register_models(register):
        register("tiny:plugin-made", _write, "plugin-made.bin", "2")
'''


def test_models_register_through_the_hook_with_the_same_isolation(plugin_path: Path) -> None:
    _install_fake_dist(
        plugin_path, "lab_models_third",
        """
        [lab.models]
        made = lab_models_plugin
        legacy = lab_legacy_models:register
        raising = lab_raising_models
        """,
        {
            "lab_models_plugin": MODELS_PLUGIN,
            "lab_legacy_models": '''
                def register(register_model):
                    register_model("tiny:legacy-made", lambda path: path.write_text("x"), "legacy.bin")
            ''',
            "lab_raising_models": '''
                from lab.hookspecs import hookimpl

                @hookimpl
                def lab_register_models(register):
                    raise RuntimeError("model plugin bug")
            ''',
        },
    )
    reg = load_registry()
    assert reg.models["tiny:plugin-made"].filename == "plugin-made.bin"
    assert reg.models["tiny:plugin-made"].version == "2"
    assert reg.origins["model:tiny:plugin-made"] == "made"
    failed = {e.entry_point: e for e in reg.errors}
    # a bare function is not a plugin: it is listed, not silently ignored
    assert "tiny:legacy-made" not in reg.models
    assert "implements no lab hook" in failed["legacy"].error
    assert "model plugin bug" in failed["raising"].error and failed["raising"].group == "lab.models"
    # The built-in plugins' models load beside them.
    assert "embedded:smollm2-q4_0" in reg.models


def test_a_model_ref_registered_twice_is_a_load_error(plugin_path: Path) -> None:
    _install_fake_dist(
        plugin_path, "lab_models_dup", "[lab.models]\nmade1 = lab_models_a\nmade2 = lab_models_b\n",
        {"lab_models_a": MODELS_PLUGIN, "lab_models_b": MODELS_PLUGIN},
    )
    reg = load_registry()
    assert [e.entry_point for e in reg.errors if "already registered" in e.error] == ["made2"]


def test_resolve_builds_a_hook_registered_model(plugin_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lab.kit import models

    _install_fake_dist(plugin_path, "lab_models_resolve", "[lab.models]\nmade = lab_models_plugin3\n",
                       {"lab_models_plugin3": MODELS_PLUGIN})
    monkeypatch.setenv("LAB_CACHE_DIR", str(plugin_path / "cache"))
    monkeypatch.setattr(models, "_BUILDERS", {})
    load_registry()
    path = models.resolve("tiny:plugin-made")
    assert path.read_text() == "a model" and path.name.endswith("plugin-made.bin")
    assert "tiny:plugin-made" in models.known_models()


@pytest.mark.slow
def test_lab_plugins_lists_model_load_errors(plugin_path: Path) -> None:
    _install_fake_dist(plugin_path, "lab_broken3", "[lab.models]\nbroken3 = lab_broken3_mod\n", {"lab_broken3_mod": "1/0\n"})
    out = subprocess.run(
        [sys.executable, "-c", "import sys; from lab.cli import main; sys.exit(main(['plugins']))"],
        capture_output=True, text=True, env={**__import__('os').environ, "PYTHONPATH": str(plugin_path)},
    )
    assert out.returncode == 0, out.stderr
    assert "broken3 (lab.models)" in out.stdout and "ZeroDivisionError" in out.stdout


@pytest.mark.slow
def test_doctor_checks_come_from_plugins(plugin_path: Path) -> None:
    _install_fake_dist(
        plugin_path, "lab_doctor_third", "[lab.backends]\ndoc = lab_doctor_plugin\nbad-doc = lab_bad_doctor\n",
        {
            "lab_doctor_plugin": '''
                from lab.kit.checks import Check
                from lab.hookspecs import hookimpl

                @hookimpl
                def lab_doctor_checks(register):
                    register(Check("frobnicator", False, "not installed", "pip install frobnicator"))
            ''',
            "lab_bad_doctor": '''
                from lab.hookspecs import hookimpl

                @hookimpl
                def lab_doctor_checks(register):
                    raise OSError("cannot run the tool")
            ''',
        },
    )
    checks = {c.name: c for c in load_registry().doctor_checks()}
    assert checks["frobnicator"].fix == "pip install frobnicator" and not checks["frobnicator"].ok
    assert not checks["bad-doc"].ok and "cannot run the tool" in checks["bad-doc"].detail
    # The built-in llama.cpp plugin reports its engine package.
    assert "llama-cpp-python" in checks


def test_accepts_drafters_must_match_the_drafting_capability(plugin_path: Path) -> None:
    _install_fake_dist(
        plugin_path, "lab_liar", "[lab.backends]\nliar = lab_liar_backend\n",
        {"lab_liar_backend": '''
            from lab.api import Backend
            from lab.hookspecs import hookimpl

            class Liar(Backend):
                name = "liar"
                stack = "liar"
                accepts_drafters = True

                def load(self, emit): ...
                def generate(self, request, emit, cancelled): ...
                def close(self): ...

            @hookimpl
            def lab_register_backends(register):
                register(Liar)
        '''},
    )
    reg = load_registry()
    assert "liar" not in reg.backends
    assert any(e.entry_point == "liar" and "Drafting" in e.error for e in reg.errors)


def test_a_plugin_may_register_its_own_model_namespace(plugin_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lab.kit import models

    _install_fake_dist(plugin_path, "lab_models_ns", "[lab.models]\nacme = lab_models_acme\n", {"lab_models_acme": '''
        from lab.hookspecs import hookimpl

        @hookimpl
        def lab_register_models(register):
            register("acme:rocket", lambda path: path.write_text("boom"), "rocket.bin")
    '''})
    monkeypatch.setenv("LAB_CACHE_DIR", str(plugin_path / "cache"))
    monkeypatch.setattr(models, "_BUILDERS", {})
    load_registry()
    assert models.resolve("acme:rocket").read_text() == "boom"
    with pytest.raises(models.ModelNotFound, match="no such built-in model"):
        models.resolve("acme:missile")
    # The llama.cpp plugin registers its synthetic timing models.
    assert "synthetic:llama-8b" in models.known_models()


def test_a_misspelled_hook_is_a_load_error_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pluggy's check_pending at load: a hook no hookspec names is refused,
    not silently ignored."""
    site = tmp_path / "site"
    info = site / "typo_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (site / "typo_plugin.py").write_text(
        "from lab.hookspecs import hookimpl\n\n@hookimpl\ndef lab_register_drafter(register):\n    pass\n")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: typo-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[lab.drafters]\ntypo = typo_plugin\n")
    monkeypatch.syspath_prepend(str(site))
    import importlib

    importlib.invalidate_caches()
    registry = load_registry()
    errors = {e.entry_point: e.error for e in registry.errors}
    assert "typo" in errors and "lab_register_drafter" in errors["typo"], errors
