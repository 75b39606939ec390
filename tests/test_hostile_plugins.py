"""Broken plugins: an installed distribution whose code exits, raises what
is no Exception, or declares attributes off the contract. Each is a listed
load error naming the plugin (rc 2 under strict mode), never a silent exit
of `lab check`, a traceback, or a check that passes what `lab plugins` then
cannot list. A real Ctrl-C while plugins load still stops the lab."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Iterator

import pytest

from lab.api import Option
from lab.registry import load_registry

ROOT = Path(__file__).resolve().parents[1]
_serial = itertools.count()


def install(root: Path, dist: str, module: str, src: str, group: str = "lab.drafters") -> None:
    """A distribution in ``root`` whose entry point loads ``src``; the
    module's name is made unique (an imported module stays in sys.modules)."""
    module = f"{module}_{next(_serial)}"
    info = root / f"{dist}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{dist} = {module}\n")
    (root / f"{module}.py").write_text(textwrap.dedent(src))


def drafter(body: str = "", at_import: str = "", in_hook: str = "") -> str:
    """A drafter plugin named ``broken`` with ``body`` in its class, code run
    at import and code run inside its register hook."""
    body = textwrap.indent(textwrap.dedent(body), "    ")
    hook = textwrap.indent(textwrap.dedent(in_hook), "    ")
    return (
        "import os, signal, sys, time\n"
        "from lab.api import Draft, Drafter, Option\nfrom lab.hookspecs import hookimpl\n"
        f"{textwrap.dedent(at_import)}\n\n"
        "class Broken(Drafter):\n    name = 'broken'\n    description = 'a broken drafter'\n"
        f"{body}\n"
        "    def draft(self, context, k):\n        return Draft(())\n\n\n"
        "@hookimpl\ndef lab_register_drafters(register):\n"
        f"{hook}\n    register(Broken)\n"
    )


CASES = {
    "SystemExit(0) at import": drafter(at_import="raise SystemExit(0)"),
    "sys.exit(3) at import": drafter(at_import="sys.exit(3)"),
    "SystemExit(0) in register": drafter(in_hook="raise SystemExit(0)"),
    "sys.exit(3) in register": drafter(in_hook="sys.exit(3)"),
    "BaseException subclass at import": drafter(at_import="class Odd(BaseException):\n    pass\nraise Odd('odd')"),
    "BaseException subclass in register": drafter(in_hook="class Odd(BaseException):\n    pass\nraise Odd('odd')"),
    "GeneratorExit at import": drafter(at_import="raise GeneratorExit"),
    "KeyboardInterrupt raised at import": drafter(at_import="raise KeyboardInterrupt"),
    "KeyboardInterrupt raised in register": drafter(in_hook="raise KeyboardInterrupt"),
    "options = 5": drafter("options = 5"),
    "stacks = 5": drafter("stacks = 5"),
    "options of strings": drafter("options = ('w',)"),
    "Option default of another type": drafter("options = (Option('w', int, 'notint', min='a'),)"),
    "Option min not a number": drafter("options = (Option('w', int, 1, min='a'),)"),
    "Option min above max": drafter("options = (Option('w', int, 1, min=5, max=2),)"),
    "Option max infinite": drafter("options = (Option('w', float, 1.0, max=float('inf')),)"),
    "Option choices a list": drafter("options = (Option('w', str, 'a', choices=['a', 'b']),)"),
    "Option choices of another type": drafter("options = (Option('w', int, 1, choices=(1, 'two')),)"),
    "Option default not a choice": drafter("options = (Option('w', str, 'c', choices=('a', 'b')),)"),
    "Option bool default for int": drafter("options = (Option('w', int, True),)"),
    "Option type not an option type": drafter("options = (Option('w', dict, None),)"),
    "Option name not an identifier": drafter("options = (Option('a b', int, 1),)"),
    "Option name not a string": drafter("options = (Option(5, int, 1),)"),
    "Option item_type without list": drafter("options = (Option('w', int, 1, item_type=str),)"),
    "Option list default of other items": drafter("options = (Option('w', list, [1], item_type=str),)"),
    "Option requires not pairs": drafter("options = (Option('w', str, 'a', requires=('x',)),)"),
    "Option required not bool": drafter("options = (Option('w', str, 'a', required='yes'),)"),
    "Option help not a string": drafter("options = (Option('w', str, 'a', help=5),)"),
    "Option declared twice": drafter("options = (Option('w', int, 1), Option('w', int, 2))"),
}


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.delenv("LAB_PLUGINS_STRICT", raising=False)
    monkeypatch.delenv("LAB_BLOCK_PLUGINS", raising=False)
    return root


def lab(site: Path, *args: str, strict: bool = False, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT), str(ROOT / "plugins")])}
    env.pop("LAB_BLOCK_PLUGINS", None)
    env.pop("LAB_PLUGINS_STRICT", None)
    if strict:
        env["LAB_PLUGINS_STRICT"] = "1"
    # a test process that inherited SIGINT ignored would hand that on: the lab starts as from a terminal
    return subprocess.run([sys.executable, "-m", "lab.cli", *args], capture_output=True, text=True, env=env,
                          timeout=120, cwd=cwd, check=False,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


PROFILE = """[profile]
name = "uses-broken"

[run]
max_tokens = 8
rounds = 1

[[prompts]]
name = "p"
text = "Write about tides."

[[arms]]
name = "base"
backend = "llamacpp"
model = "embedded:smollm2"

[[arms]]
name = "spec"
backend = "llamacpp"
model = "embedded:smollm2"
drafter = "broken"
"""


@pytest.mark.parametrize("label", list(CASES))
def test_a_broken_plugin_is_a_listed_load_error(site: Path, label: str) -> None:
    install(site, "lab-broken", "lab_broken_plugin", CASES[label])
    registry = load_registry()
    assert "broken" not in registry.drafters
    errors = [e for e in registry.errors if e.entry_point == "lab-broken"]
    assert len(errors) == 1, (label, registry.errors)
    # the built-ins are whole
    assert {"ngram", "oracle", "draft-model"} <= set(registry.drafters)
    if label.startswith(("options", "stacks", "Option")):
        assert "Broken" in errors[0].error, errors[0].error


@pytest.mark.slow
@pytest.mark.parametrize("label", ["SystemExit(0) at import", "sys.exit(3) in register",
                                   "BaseException subclass at import", "KeyboardInterrupt raised at import",
                                   "options = 5", "stacks = 5", "Option default of another type"])
def test_lab_check_of_a_profile_naming_a_broken_plugin_fails_saying_why(site: Path, tmp_path: Path,
                                                                         label: str) -> None:
    install(site, "lab-broken", "lab_broken_plugin", CASES[label])
    profile = tmp_path / "p.toml"
    profile.write_text(PROFILE)
    got = lab(site, "check", str(profile))
    assert got.returncode == 2, (got.returncode, got.stdout, got.stderr)
    assert "Traceback" not in got.stderr
    assert "lab-broken" in got.stderr and "broken" in got.stderr, got.stderr
    # `lab plugins` lists the error and exits cleanly
    listed = lab(site, "plugins")
    assert "Traceback" not in listed.stderr, listed.stderr
    assert "lab-broken" in listed.stdout + listed.stderr
    # strict mode makes it fatal: rc 2 with the plugin named
    strict = lab(site, "check", str(profile), strict=True)
    assert strict.returncode == 2 and "lab-broken" in strict.stderr and "Traceback" not in strict.stderr, strict.stderr


@pytest.fixture
def ctrl_c_handler() -> Iterator[None]:
    """Python's own Ctrl-C handler, as a lab started from a terminal has it
    (a test process may have inherited SIGINT ignored), given back after."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.mark.usefixtures("ctrl_c_handler")
def test_a_real_ctrl_c_while_plugins_load_still_stops_the_lab(site: Path) -> None:
    install(site, "lab-broken", "lab_broken_plugin",
            drafter(at_import="os.kill(os.getpid(), signal.SIGINT)\ntime.sleep(5)"))
    with pytest.raises(KeyboardInterrupt):
        load_registry()


@pytest.mark.slow
def test_a_real_ctrl_c_in_lab_check_ends_it_as_a_ctrl_c(site: Path, tmp_path: Path) -> None:
    install(site, "lab-broken", "lab_broken_plugin",
            drafter(at_import="os.kill(os.getpid(), signal.SIGINT)\ntime.sleep(5)"))
    profile = tmp_path / "p.toml"
    profile.write_text(PROFILE)
    got = lab(site, "check", str(profile))
    # ended as a Ctrl-C ends the lab: not a load error, not a check
    assert got.returncode == 130, (got.returncode, got.stderr)
    assert "interrupted (Ctrl-C)" in got.stderr and "failed to load" not in got.stderr and "ok," not in got.stdout


def test_the_sigint_handler_is_given_back(site: Path) -> None:
    before = signal.getsignal(signal.SIGINT)
    install(site, "lab-broken", "lab_broken_plugin", CASES["KeyboardInterrupt raised at import"])
    load_registry()
    assert signal.getsignal(signal.SIGINT) is before


def test_every_installed_option_is_well_declared() -> None:
    registry = load_registry()
    for cls in [*registry.backends.values(), *registry.drafters.values()]:
        for opt in cls.options:
            assert opt.problem() is None, (cls.name, opt)


@pytest.mark.parametrize("opt", [
    Option("n", int, 3, min=1, max=8), Option("f", float, 0.5, min=0, max=1), Option("s", str, "a", choices=("a", "b")),
    Option("l", list, [], item_type=str), Option("b", bool, False), Option("m", str, None, model_ref=True),
    Option("r", str, "x", requires=(("x", ("m",)),)),
])
def test_good_options_have_no_problem(opt: Option) -> None:
    assert opt.problem() is None


# -- the scaffold --------------------------------------------------------------------

@pytest.mark.parametrize("name", ["evil\n", "evil\r\n", "\nevil", "ev\nil", "evil\x00", "evil\x1b[2J", "evil ",
                                  "Evil", "-evil", "évil", "e" * 41, "", "evil\u202e"])
def test_a_scaffold_name_is_matched_whole(tmp_path: Path, name: str) -> None:
    from lab.scaffold import ScaffoldError, write_drafter_package

    with pytest.raises(ScaffoldError, match="use lowercase letters"):
        write_drafter_package(name, tmp_path / "pkg", taken=())
    assert not (tmp_path / "pkg").exists()


def test_lab_new_drafter_refuses_a_trailing_newline_writing_nothing(site: Path, tmp_path: Path) -> None:
    where = tmp_path / "cwd"
    where.mkdir()
    got = lab(site, "new-drafter", "evil\n", cwd=where)
    assert got.returncode == 2 and "\\n" in got.stderr, got.stderr
    assert list(where.iterdir()) == []


@pytest.mark.parametrize("name", ["ngram", "oracle", "draft-model", "draft_model"])
def test_a_builtin_drafter_name_is_refused(tmp_path: Path, name: str) -> None:
    from lab.scaffold import ScaffoldError, write_drafter_package

    with pytest.raises(ScaffoldError, match="installed already"):
        write_drafter_package(name, tmp_path / "pkg")
    assert not (tmp_path / "pkg").exists()


@pytest.mark.slow
def test_an_installed_plugin_drafter_name_is_refused(site: Path, tmp_path: Path) -> None:
    install(site, "lab-mine", "lab_mine_plugin", drafter().replace("'broken'", "'mine'"))
    got = lab(site, "new-drafter", "mine", "--dir", str(tmp_path / "pkg"))
    assert got.returncode == 2 and "installed already" in got.stderr, got.stderr
    assert not (tmp_path / "pkg").exists()


def test_a_new_name_is_still_scaffolded(tmp_path: Path) -> None:
    from lab.scaffold import write_drafter_package

    made = write_drafter_package("look-ahead", tmp_path / "pkg")
    assert (tmp_path / "pkg" / "lab_look_ahead.py").is_file() and made.name == "look-ahead"
