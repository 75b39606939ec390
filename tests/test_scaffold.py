"""The plugin author's path: `lab new-drafter` writes a package that installs
into a fresh environment and runs on the real engine; `lab plugins` says
truthfully where a drafter runs; a plugin's option written at the arm's level
is refused with where it belongs; the README names every profile key the
validator accepts."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from lab.cli import main
from lab.profile import validate
from lab.profile.load import ProfileError, check_profile
from lab.profile.suites import SUITE_KEYS
from lab.registry import load_registry
from lab.scaffold import ScaffoldError, write_drafter_package

ROOT = Path(__file__).resolve().parent.parent


def test_scaffold_writes_a_complete_package(tmp_path: Path) -> None:
    made = write_drafter_package("look-back", tmp_path / "pkg")
    names = {p.name for p in made.files}
    assert names == {"pyproject.toml", "lab_look_back.py", "look-back.toml", "README.md", "test_lab_look_back.py"}
    pyproject = (tmp_path / "pkg" / "pyproject.toml").read_text()
    assert '[project.entry-points."lab.drafters"]\nlook-back = "lab_look_back"' in pyproject
    module = (tmp_path / "pkg" / "lab_look_back.py").read_text()
    assert "class LookBackDrafter(Drafter)" in module and 'Option("window"' in module
    compile(module, "lab_look_back.py", "exec")
    with pytest.raises(ScaffoldError, match="not an empty directory"):
        write_drafter_package("other", tmp_path / "pkg")
    with pytest.raises(ScaffoldError, match="lowercase"):
        write_drafter_package("Bad Name", tmp_path / "bad")
    assert main(["new-drafter", "Bad Name", "--dir", str(tmp_path / "x")]) == 2


def _fresh_env(tmp_path: Path) -> Path:
    """A new virtual environment that sees the lab (and its engines) through
    a .pth file, as a user's environment with the lab installed would."""
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(env)], check=True)
    python = env / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # the lab's own environment (speclab, llama-cpp-python, pip, setuptools),
    # added as a site directory so that its own .pth files (the lab's
    # editable install) are read too
    parent = sysconfig.get_paths()["purelib"]
    (Path(site) / "lab-parent.pth").write_text(f"import site; site.addsitedir({parent!r})\n")
    return python


@pytest.mark.slow
def test_scaffolded_drafter_installs_into_a_fresh_env_and_runs(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    made = write_drafter_package("lookback", tmp_path / "lab-lookback-drafter")
    python = _fresh_env(tmp_path)
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-e",
         str(made.directory)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stdout + install.stderr

    def lab(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(python), "-m", "lab.cli", *args], cwd=tmp_path, capture_output=True, text=True,
                              timeout=600)

    listed = lab("plugins")
    assert listed.returncode == 0, listed.stderr
    line = next(x for x in listed.stdout.splitlines() if x.strip().startswith("lookback "))
    assert "runs on llamacpp" in line and "llamacpp-server" not in line
    assert "window: int" in listed.stdout
    # the lab's own environment does not see it: the fresh one holds it
    assert "lookback" not in load_registry().drafters

    profile = made.directory / "lookback.toml"
    text = profile.read_text().replace("max_tokens = 200", "max_tokens = 8").replace(
        "rounds = 2", "rounds = 1\nwarmup = 0\nprobe = false").replace("n_max = [2, 4]", "n_max = 3")
    profile.write_text(text)
    run = lab("run", str(profile), "--out", "runs", "--quiet")
    assert run.returncode == 0, run.stderr
    results = json.loads(next((tmp_path / "runs").glob("*/results.json")).read_text())["results"]
    row = next(r for r in results if r["arm"] == "lookback")
    assert row["status"] == "ok" and row["drafter"] == "lookback" and row["n_tokens"] == 8
    assert row["baseline_arm"] == "baseline"


def test_lab_plugins_says_which_backends_run_each_drafter(capsys: pytest.CaptureFixture[str]) -> None:
    registry = load_registry()
    for dcls in registry.drafters.values():
        hosts = registry.drafter_backends(dcls)
        for backend in hosts:
            assert registry.backends[backend].accepts_drafters
        # no server backend runs a drafter plugin
        assert not [b for b in hosts if "server" in registry.backends[b].stack]
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "[any stack]" not in out
    if "llamacpp" in registry.backends:
        assert re.search(r"^  ngram  \[runs on [^\]]*llamacpp", out, re.M)


PROFILE = """
[profile]
name = "x"

[[prompts]]
name = "a"
text = "hi"

[[arms]]
name = "base"
backend = "{backend}"
model = "embedded:smollm2"

[[arms]]
name = "s"
backend = "{backend}"
model = "embedded:smollm2"
{extra}
"""


@pytest.mark.parametrize(("backend", "extra", "where"), [
    ("llamacpp-server", 'spec_type = "ngram-mod"', "put it under options = { spec_type = ... }; see `lab plugins`"),
    ("llamacpp", 'spec_type = "ngram-mod"', "on an arm whose backend is 'llamacpp-server'"),
    ("llamacpp", 'drafter = "ngram"\nmax_ngram = 3', "put it under drafter_options = { max_ngram = ... }"),
])
def test_a_plugin_option_at_the_arm_level_says_where_it_belongs(tmp_path: Path, backend: str, extra: str,
                                                                 where: str) -> None:
    registry = load_registry()
    if backend not in registry.backends or "llamacpp-server" not in registry.backends:
        pytest.skip(f"backend {backend} is not installed")
    path = tmp_path / "p.toml"
    path.write_text(PROFILE.format(backend=backend, extra=extra))
    with pytest.raises(ProfileError) as err:
        check_profile(path, registry)
    text = str(err.value)
    assert "p.toml:" in text and "arms[1]." in text and where in text, text


def test_the_profiles_page_names_every_profile_key() -> None:
    # the README is a front door now: every key is documented in docs/profiles.md
    readme = (ROOT / "docs" / "profiles.md").read_text()
    keys = {
        "top level": validate.TOP_KEYS, "[profile]": validate.PROFILE_KEYS,
        "[[prompts]]": (*validate.PROMPT_KEYS, *SUITE_KEYS), "[[arms]]": validate.ARM_KEYS,
        "[run]": tuple(validate.RUN_TYPES),
    }
    missing = [
        f"{where} {key}" for where, names in keys.items() for key in names
        # as code (`key`), as a TOML line (key = ...), or as a table ([key], [[key]])
        if not re.search(rf"(`{key}`|^\s*#?\s*{key}\s*=|\[\[?{key}\]\]?|\b{key} = )", readme, re.M)
    ]
    assert not missing, f"docs/profiles.md does not document: {missing}"


PLUGINS_PAGE = ROOT / "docs" / "plugins.md"


def test_the_plugin_page_is_the_scaffold(tmp_path: Path) -> None:
    """The module and pyproject docs/plugins.md shows are the ones the
    scaffold writes (so the page stays runnable)."""
    readme = PLUGINS_PAGE.read_text()
    section = readme[readme.index("## Start from the scaffold"):readme.index("## Unit tests without a model")]
    blocks = re.findall(r"```(\w+)\n(.*?)```", section, re.S)
    python = next(body for lang, body in blocks if lang == "python")
    made = write_drafter_package("lookback", tmp_path / "pkg")
    module = (tmp_path / "pkg" / "lab_lookback.py").read_text()
    code_lines = [ln.split("#")[0].rstrip() for ln in module.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    for ln in python.splitlines():
        if ln.strip() and not ln.strip().startswith(("#", '"""')):
            assert ln.split("#")[0].rstrip() in code_lines, f"README line not in the scaffold: {ln!r}"
    namespace: dict[str, object] = {}
    exec(compile(python, "readme", "exec"), namespace)  # the README's own example
    assert made.name == "lookback"


@pytest.mark.slow
def test_the_scaffolds_own_test_passes_against_the_fake_target(tmp_path: Path) -> None:
    made = write_drafter_package("echo-back", tmp_path / "pkg", taken=[])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(made.directory), str(ROOT), str(ROOT / "plugins")])}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"]
    done = subprocess.run(cmd, cwd=made.directory, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout
    # the same test fails for a drafter that proposes what the target never says
    module = made.directory / "lab_echo_back.py"
    module.write_text(module.read_text().replace("return Draft(tuple(context[i + 1:i + 1 + k]))",
                                                 "return Draft(tuple([0] * k))"))
    done = subprocess.run(cmd, cwd=made.directory, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "acceptance" in done.stdout, done.stdout


def test_the_fake_target_refuses_a_draft_the_loop_would(tmp_path: Path) -> None:
    from lab.api import Draft, Drafter
    from lab.kit.testing import ContractBroken, make_drafter, run_drafter

    class Wild(Drafter):
        name = "wild"

        def draft(self, context, k):  # type: ignore[no-untyped-def]
            return Draft((10_000,))

    with pytest.raises(ContractBroken, match="not an id in the vocabulary"):
        run_drafter(make_drafter(Wild), [2, 3], max_tokens=8)
    with pytest.raises(ValueError, match="no option"):
        make_drafter(Wild, {"nope": 1})


def test_printed_commands_name_the_labs_own_environment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from lab.base.machine import own_tool
    from lab.cli.doctor import own_tools

    pip = own_tool("pip")
    assert pip != "pip" and (Path(pip).exists() or pip.endswith(" -m pip"))
    assert own_tools('pip install -e ".[mlx]"') == f'{pip} install -e ".[mlx]"'
    assert own_tools("bash scripts/setup.sh llamacpp") == "bash scripts/setup.sh llamacpp"
    assert main(["new-drafter", "venvy", "--dir", str(tmp_path / "v")]) == 0
    out = capsys.readouterr().out.splitlines()
    nxt = [ln for ln in out if ln.startswith("next, from here:")][0]
    assert f"next, from here: {pip} install -e" in nxt and " pip install" not in nxt.replace(pip, "")
    # how to get pytest is said beside the test command
    tests_line = [ln for ln in out if ln.startswith("its tests:")][0]
    assert "install pytest" in tests_line and " -q" in tests_line


def test_the_scaffolds_commands_work_from_the_package_directory(tmp_path: Path, monkeypatch) -> None:
    """Written from one directory, read from another: every tool the
    package's README and profile name is a full path (or this interpreter
    running a module), never one relative to where new-drafter ran."""
    import shlex

    from lab.scaffold import env_tool

    monkeypatch.chdir(tmp_path)
    made = write_drafter_package("wander", "pkg", taken=[])
    readme = (made.directory / "README.md").read_text()
    block = re.search(r"```sh\n(.*?)```", readme, re.S)
    assert block
    commands = [ln.split("#")[0].strip() for ln in block.group(1).splitlines() if ln.strip()]
    assert len(commands) >= 5
    for command in commands:
        tool = shlex.split(command)[0]
        assert Path(tool).is_absolute(), command
        assert Path(tool).exists() or tool == sys.executable, command
    assert any("install pytest" in c for c in commands)
    assert env_tool("pytest") in readme and env_tool("pip") in readme
    assert "docs/plugins.md" in readme
    test = next((made.directory / "tests").iterdir()).read_text()
    assert "install pytest" in test and "FakeTarget" in test


def test_the_plugin_page_documents_the_helpers_as_the_code_declares_them() -> None:
    """The signatures docs/plugins.md gives for make_drafter and run_drafter
    are the code's, and its example call runs against the page's own drafter."""
    import inspect

    from lab.kit import testing

    page = PLUGINS_PAGE.read_text()
    for fn in (testing.make_drafter, testing.run_drafter):
        params = ", ".join(
            p.name if p.default is inspect.Parameter.empty else f"{p.name}={p.default!r}"
            for p in inspect.signature(fn).parameters.values())
        documented = f"`{fn.__name__}({params})`"
        assert documented in page.replace("\n  ", " ").replace("\n", " "), documented
    target = testing.FakeTarget()
    assert f"FakeTarget(pattern=tuple(range(2, 12)), vocab_size={target.vocab_size})" in page
    assert target.pattern == tuple(range(2, 12))
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    module, example = blocks[0], blocks[1]
    space: dict[str, object] = {}
    exec(compile(module, "docs/plugins.md", "exec"), space)  # the page's own example
    exec(compile(example, "docs/plugins.md", "exec"), space)  # the documented call
