"""The set-up scripts as a clean Mac or a fresh Linux box meets them: which
Python they take (and that they stop before making anything without one),
which installer they choose, and that they keep to what macOS's BSD tools and
bash 3.2 offer.

The portability check is both static and run: every line of the scripts is
read for GNU-only options and bash 4 features (a trailing ``# portable:
REASON`` exempts a line), and the scripts' own paths run on a PATH whose
sed, stat, mv, cp, readlink, date, find, split and grep refuse the GNU-only
options as the BSD tools do, with nproc, sha256sum, flock and timeout gone.
scripts/device/ is left out: it runs on the Linux GPU hosts only.

Nothing here reaches the network: installers are stand-ins that record what
they were asked, and each run works in a copy of the checkout."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "scripts").glob("*.sh")) + [ROOT / ".ci" / "run"]


def _uv_versions() -> tuple[str, str, str]:
    """pyproject.toml's minimum uv, a uv just at it and one just below."""
    found = re.search(r'^required-version = ">=([0-9.]+)"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert found, "pyproject.toml's [tool.uv] names no required-version"
    parts = [int(p) for p in found.group(1).split(".")] + [0] * (3 - found.group(1).count(".") - 1)
    below = parts[:-1] + [parts[-1] - 1] if parts[-1] else parts[:-2] + [parts[-2] - 1, 99]
    return found.group(1), ".".join(map(str, parts)), ".".join(map(str, below))


UV_MIN, UV_AT_MIN, UV_BELOW = _uv_versions()


def _write(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _fake_python(folder: Path, name: str, version: str, log: Path) -> Path:
    """An interpreter that reports VERSION to any `-c` query and records every
    other call (a venv, a pip install), failing it."""
    return _write(folder / name, f'if [ "$1" = -c ]; then echo {version}; exit 0; fi\n'
                                 f'echo "{name} $*" >> "{log}"\nexit 3\n')


def _fake_uv(folder: Path, version: str, log: Path) -> Path:
    return _write(folder / "uv", f'if [ "$1" = --version ]; then echo "uv {version}"; exit 0; fi\n'
                                 f'echo "uv $*" >> "{log}"\nexit 3\n')


def _fake_uname(folder: Path, system: str, machine: str) -> Path:
    return _write(folder / "uname", f'case "$1" in -s) echo {system};; -m) echo {machine};; '
                                    f'-sm|-ms) echo "{system} {machine}";; *) echo {system};; esac\n')


# Tools a BSD userland lacks or spells differently. Each wrapper refuses the
# GNU-only options and otherwise runs the real tool.
_REFUSED = {
    "sed": r'-i|-r|--*) echo "sed: illegal option $a (BSD sed: -i needs a suffix, -E for -r)" >&2; exit 1;;',
    "stat": r'-c|--*) echo "stat: illegal option $a (BSD stat: -f)" >&2; exit 1;;',
    "mv": r'-T|-*T*|-t|--*) echo "mv: illegal option $a" >&2; exit 1;;',
    "cp": r'--*|-t|-T) echo "cp: illegal option $a" >&2; exit 1;;',
    "readlink": r'-f|-e|-m|--*) echo "readlink: illegal option $a" >&2; exit 1;;',
    "date": r'-d|--*) echo "date: illegal option $a" >&2; exit 1;;',
    "find": r'-printf|-fprintf|-regextype) echo "find: unknown primary $a" >&2; exit 1;;',
    "split": r'-d|--*) echo "split: illegal option $a" >&2; exit 1;;',
    "grep": r'-P|-*P*) echo "grep: illegal option $a" >&2; exit 1;;',
}
_GONE = {"nproc", "sha256sum", "sha512sum", "flock", "timeout", "stdbuf"}


def _plain_bin(tmp: Path, *, bsd: bool) -> Path:
    """Every tool on PATH but Python, pip and uv (so that only the fakes a
    test adds answer to those names); with `bsd`, GNU-only options refused."""
    out = tmp / ("bsd-bin" if bsd else "plain-bin")
    out.mkdir()
    for folder in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(folder):
            continue
        for entry in os.scandir(folder):
            name = entry.name
            if name.startswith(("python", "pip", "uv", "pydoc", "idle", "2to3")) or (out / name).exists():
                continue
            if bsd and name in _GONE:
                continue
            if not os.access(entry.path, os.X_OK) or entry.is_dir():
                continue
            if bsd and name in _REFUSED:
                real = os.path.realpath(entry.path)
                _write(out / name, f'for a in "$@"; do case "$a" in {_REFUSED[name]} esac; done\n'
                                   f'exec "{real}" "$@"\n')
            else:
                (out / name).symlink_to(entry.path)
    return out


@pytest.fixture(scope="module")
def plain_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _plain_bin(tmp_path_factory.mktemp("path"), bsd=False)


@pytest.fixture(scope="module")
def bsd_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _plain_bin(tmp_path_factory.mktemp("path"), bsd=True)


def _checkout(tmp: Path) -> Path:
    """The files set-up reads, copied: a run here never touches the worktree."""
    repo = tmp / "repo"
    (repo / "scripts").mkdir(parents=True)
    for script in (ROOT / "scripts").glob("*.sh"):
        shutil.copy2(script, repo / "scripts" / script.name)
    for name in ("pyproject.toml", "uv.lock"):
        shutil.copy2(ROOT / name, repo / name)
    return repo


def _run(repo: Path, script: str, *args: str, path: list[Path], **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items()
            if k not in {"PYTHON", "UV", "VENV", "LAB_INSTALLER", "LAB_WHEELHOUSE", "VIRTUAL_ENV"}}
    full = {**base, "PATH": os.pathsep.join(str(p) for p in path), "HOME": str(repo.parent / "home"),
            "XDG_CACHE_HOME": str(repo.parent / "cache"), **env}
    return subprocess.run(["bash", str(repo / "scripts" / script), *args], capture_output=True, text=True,
                          timeout=120, cwd=repo.parent, env=full)


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# -- Python -------------------------------------------------------------------


@pytest.mark.parametrize("system, tools, line", [
    ("Darwin", {"brew": ""}, "brew install python@3.12"),
    ("Darwin", {}, "install Homebrew"),
    ("Linux", {"apt-get": ""}, "sudo apt-get install python3 python3-venv"),
])
def test_setup_with_only_an_old_python_stops_before_making_anything(
        tmp_path: Path, plain_bin: Path, system: str, tools: dict[str, str], line: str) -> None:
    repo = _checkout(tmp_path)
    fakes = tmp_path / "fakes"
    log = tmp_path / "calls.log"
    # A clean Mac: python3 is the Command Line Tools' 3.9, nothing newer.
    _fake_python(fakes, "python3", "3.9", log)
    _fake_python(fakes, "python3.9", "3.9", log)
    _fake_uname(fakes, system, "arm64" if system == "Darwin" else "x86_64")
    for name in tools:
        _write(fakes / name, "exit 0\n")
    before = _tree(tmp_path)

    out = _run(repo, "setup.sh", "all,test", path=[fakes, plain_bin])

    assert out.returncode != 0
    assert "python3 is 3.9" in out.stderr, out.stderr  # refused by its version, not for failing to run
    assert line in out.stderr
    assert _tree(tmp_path) == before  # no .venv, no cache, no uv
    assert not log.exists()  # the old Python was asked its version and nothing else


def test_the_newest_python_that_runs_is_taken(tmp_path: Path, plain_bin: Path) -> None:
    repo = _checkout(tmp_path)
    fakes = tmp_path / "fakes"
    log = tmp_path / "calls.log"
    _fake_python(fakes, "python3", "3.9", log)
    _fake_python(fakes, "python3.10", "3.10", log)
    _fake_python(fakes, "python3.12", "3.12", log)
    _write(fakes / "python3.13", 'echo "pyenv: python3.13: command not found" >&2; exit 127\n')  # a shim
    found = _run(repo, "find_python.sh", path=[fakes, plain_bin])
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == str(fakes / "python3.12")

    # one named is taken as it is, or refused for its version
    named = _run(repo, "find_python.sh", path=[fakes, plain_bin], PYTHON=str(fakes / "python3.10"))
    assert named.returncode == 0 and named.stdout.strip() == str(fakes / "python3.10")
    old = _run(repo, "find_python.sh", path=[fakes, plain_bin], PYTHON=str(fakes / "python3"))
    assert old.returncode == 1 and "is Python 3.9" in old.stderr and old.stdout == ""


def test_a_real_interpreter_passes_the_same_check(tmp_path: Path, plain_bin: Path) -> None:
    # The check the fakes answer is the one a real Python answers.
    repo = _checkout(tmp_path)
    out = _run(repo, "find_python.sh", path=[plain_bin], PYTHON=sys.executable)
    assert out.returncode == 0 and out.stdout.strip() == sys.executable, out.stderr


# -- installer ----------------------------------------------------------------


def _setup_until_install(tmp_path: Path, plain_bin: Path, uv: str | None, **env: str
                         ) -> tuple[subprocess.CompletedProcess[str], str]:
    repo = _checkout(tmp_path)
    fakes = tmp_path / "fakes"
    log = tmp_path / "calls.log"
    _fake_python(fakes, "python3.12", "3.12", log)
    if uv:
        _fake_uv(fakes, uv, log)
    out = _run(repo, "setup.sh", "llamacpp", path=[fakes, plain_bin], **env)
    assert out.returncode != 0  # every installer here is a stand-in that fails
    assert not (repo / ".venv").exists()
    return out, log.read_text() if log.exists() else ""


def test_uv_on_path_installs_by_default(tmp_path: Path, plain_bin: Path) -> None:
    out, calls = _setup_until_install(tmp_path, plain_bin, UV_AT_MIN)
    assert f"uv {UV_AT_MIN}" in out.stdout
    assert calls.splitlines() == [f"uv venv --quiet --seed --python {tmp_path / 'fakes' / 'python3.12'} .venv"]


def test_pip_when_asked_and_for_a_wheelhouse(tmp_path: Path, plain_bin: Path) -> None:
    out, calls = _setup_until_install(tmp_path / "asked", plain_bin, UV_AT_MIN, LAB_INSTALLER="pip")
    assert out.stdout.strip().endswith("pip")
    assert calls.splitlines() == ["python3.12 -m venv .venv"]

    house = tmp_path / "house"
    house.mkdir()
    out, calls = _setup_until_install(tmp_path / "offline", plain_bin, UV_AT_MIN, LAB_WHEELHOUSE=str(house))
    assert calls.splitlines() == ["python3.12 -m venv .venv"]

    out, calls = _setup_until_install(tmp_path / "typo", plain_bin, UV_AT_MIN, LAB_INSTALLER="conda")
    assert "LAB_INSTALLER is uv or pip" in out.stderr and calls == ""


@pytest.mark.parametrize("uv", [None, UV_BELOW], ids=["no uv", "an old uv"])
def test_without_a_usable_uv_one_is_installed_into_the_cache(tmp_path: Path, plain_bin: Path,
                                                             uv: str | None) -> None:
    out, calls = _setup_until_install(tmp_path, plain_bin, uv)
    if uv:
        assert f"is uv {UV_BELOW}; the lock needs {UV_MIN} or newer" in out.stderr
    tool = tmp_path / "cache" / "speclab" / "uv"
    (call,) = calls.splitlines()
    assert re.fullmatch(rf"python3\.12 -m venv {re.escape(str(tool))}\.new\.\d+", call), call
    assert "LAB_INSTALLER=pip" in out.stderr  # the way out when it cannot be installed
    assert not tool.exists() and list((tmp_path / "cache" / "speclab").iterdir()) == []


# -- BSD tools, run -------------------------------------------------------------


def test_wheelhouse_cut_and_join_with_bsd_tools(tmp_path: Path, bsd_bin: Path) -> None:
    repo = _checkout(tmp_path)
    staging = tmp_path / "staging"
    staging.mkdir()
    originals = {"big-1.0-py3-none-any.whl": os.urandom(2_600_000), "a-1.0-py3-none-any.whl": os.urandom(700_000)}
    for name, data in originals.items():
        (staging / name).write_bytes(data)
    house = tmp_path / "house"
    packed = _run(repo, "wheelhouse.sh", "pack", str(staging), str(house), path=[bsd_bin], CARRY_MB="1")
    assert packed.returncode == 0, packed.stderr
    pieces = sorted(p.name for p in house.rglob("big-*"))
    assert pieces == [f"big-1.0-py3-none-any.whl.part{i:02d}" for i in range(3)]
    flat = _run(repo, "wheelhouse.sh", "flat", str(house), path=[bsd_bin])
    assert flat.returncode == 0, flat.stderr
    assert {p.name: p.read_bytes() for p in Path(flat.stdout.strip()).iterdir()} == originals


def _stub_build(tmp_path: Path, system: str, machine: str) -> tuple[Path, Path, Path]:
    """A checkout, a venv and a cached llama.cpp source, with cmake a stand-in
    that records its arguments: build_llama.sh's own path, not the compile."""
    repo = _checkout(tmp_path)
    fakes = tmp_path / "fakes"
    _fake_uname(fakes, system, machine)
    calls = tmp_path / "cmake.log"
    _write(fakes / "cmake", f'echo "$*" >> "{calls}"\n')
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    src = tmp_path / "cache" / "speclab" / "src" / "llama_cpp_python-0.3.36"
    (src / "vendor" / "llama.cpp").mkdir(parents=True)
    (src / ".complete").touch()
    return repo, fakes, venv


@pytest.mark.parametrize("system, machine, kind, flag", [
    ("Darwin", "arm64", "Metal", "-DGGML_METAL=ON"),
    ("Linux", "x86_64", "CPU", "-DGGML_AVX2=ON"),
])
def test_the_build_names_what_it_builds_for(tmp_path: Path, bsd_bin: Path, system: str, machine: str,
                                            kind: str, flag: str) -> None:
    repo, fakes, venv = _stub_build(tmp_path, system, machine)
    out = _run(repo, "build_llama.sh", "lib", "--compile", path=[fakes, bsd_bin], VENV=str(venv), LAB_CUDA="0")
    assert out.returncode == 0, out.stderr
    assert f"building the llama.cpp library for {kind} " in out.stdout
    configure = (tmp_path / "cmake.log").read_text().splitlines()[0]
    assert flag in configure.split()
    rpath = "@loader_path" if system == "Darwin" else "$ORIGIN"
    assert f"-DCMAKE_INSTALL_RPATH={rpath}" in configure.split()


def test_python_and_uv_are_found_with_bsd_tools(tmp_path: Path, bsd_bin: Path) -> None:
    repo = _checkout(tmp_path)
    fakes = tmp_path / "fakes"
    log = tmp_path / "calls.log"
    _fake_python(fakes, "python3.11", "3.11", log)
    _fake_uv(fakes, UV_AT_MIN, log)
    found = _run(repo, "find_python.sh", path=[fakes, bsd_bin])
    assert found.returncode == 0 and found.stdout.strip() == str(fakes / "python3.11"), found.stderr
    uv = _run(repo, "find_uv.sh", str(fakes / "python3.11"), path=[fakes, bsd_bin])
    assert uv.returncode == 0 and uv.stdout.strip() == str(fakes / "uv"), uv.stderr


def test_the_bsd_stand_ins_refuse_what_bsd_refuses(tmp_path: Path, bsd_bin: Path) -> None:
    # The run checks above mean something only if the wrappers bite.
    target = tmp_path / "f"
    target.write_text("a\n")
    env = {**os.environ, "PATH": str(bsd_bin)}
    for command in (["sed", "-i", "s/a/b/", str(target)], ["stat", "-c", "%s", str(target)],
                    ["find", str(tmp_path), "-printf", "%f"], ["split", "-d", str(target)],
                    ["readlink", "-f", str(target)]):
        ran = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=30)
        assert ran.returncode != 0, command
    assert subprocess.run(["sed", "-i.bak", "s/a/b/", str(target)], env=env, timeout=30).returncode == 0
    assert target.read_text() == "b\n"
    assert shutil.which("nproc", path=str(bsd_bin)) is None


# -- BSD tools and bash 3.2, read -----------------------------------------------

# a command's name where a command starts, then its words up to the next one
_CMD = r"(?:^|[;&|(`]|\b(?:then|do|else|exec|if|while)\s|!\s)\s*"
_OPTS = r"[^|;&)]*"
_RULES: list[tuple[str, str]] = [
    (rf"{_CMD}sed\b{_OPTS}\s-i(\s|$)", "sed -i without a suffix (BSD sed reads the next word as one): sed -i.bak"),
    (rf"{_CMD}sed\b{_OPTS}\s-r\b", "sed -r: sed -E"),
    (rf"{_CMD}mv\b{_OPTS}\s-[a-zA-Z]*T\b", "mv -T"),
    (rf"{_CMD}stat\b{_OPTS}\s(-c|--format|--printf)\b", "stat -c (BSD: stat -f)"),
    (rf"{_CMD}readlink\s+-[a-z]*[fem]\b", "readlink -f"),
    (rf"{_CMD}date\b{_OPTS}\s(-d|--date)\b", "date -d"),
    (rf"{_CMD}cp\b{_OPTS}\s--", "cp's long options (--reflink, --preserve)"),
    (rf"{_CMD}find\b{_OPTS}\s-f?printf\b", "find -printf"),
    (rf"{_CMD}split\b{_OPTS}\s-d\b", "split -d"),
    (rf"{_CMD}grep\b{_OPTS}\s-[a-zA-Z]*P", "grep -P"),
    (rf"{_CMD}xargs\b{_OPTS}\s-r\b", "xargs -r"),
    (rf"{_CMD}install\s+-[a-zA-Z]*D", "install -D"),
    (rf"{_CMD}du\b{_OPTS}\s-[a-zA-Z]*b\b", "du -b"),
    (rf"{_CMD}base64\b{_OPTS}\s-w\b", "base64 -w"),
    (r"\b(mapfile|readarray)\b", "mapfile (bash 4; macOS has 3.2)"),
    (r"\bdeclare\s+-[a-zA-Z]*A", "associative arrays (bash 4)"),
    (r"\b(declare|local)\s+-[a-zA-Z]*n\b", "namerefs (bash 4.3)"),
    (r"\$\{\w+(\[[^]]*\])?(,,?|\^\^?)\}", "case conversion (bash 4)"),
    (r"\|&", "|& (bash 4)"),
    (r"&>>", "&>> (bash 4)"),
    (r"\bcoproc\b", "coproc (bash 4)"),
    (r"\bwait\s+-n\b", "wait -n (bash 4.3)"),
    (r"\$\{?EPOCH(SECONDS|REALTIME)", "EPOCHSECONDS (bash 5)"),
]
# GNU-only commands: a line may use one where it asks first (command -v) or
# falls back (||).
_COMMANDS = ("nproc", "sha256sum", "flock", "timeout", "realpath", "stdbuf", "tac")


def _code_lines(text: str) -> list[tuple[int, str]]:
    """The shell lines, comments and heredoc bodies (Python, mostly) left out."""
    out: list[tuple[int, str]] = []
    end: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if end is not None:
            if line.strip() == end:
                end = None
            continue
        if line.lstrip().startswith("#"):
            continue
        code = re.split(r"\s#\s", line, maxsplit=1)[0]
        heredoc = re.search(r"(?<!<)<<-?\s*['\"]?(\w+)['\"]?", code)
        if heredoc:
            end = heredoc.group(1)
        out.append((number, line))
    return out


def portability_problems(text: str) -> list[str]:
    lines = _code_lines(text)
    problems = []
    # Under `set -u`, bash before 4.4 calls an empty array unbound: an array
    # that may be empty is expanded as ${a[@]+"${a[@]}"}.
    empty = set(re.findall(r"\b(\w+)=\(\)", "\n".join(line for _, line in lines)))
    for number, line in lines:
        if "# portable:" in line:
            continue
        code = re.split(r"\s#\s", line, maxsplit=1)[0]
        for pattern, why in _RULES:
            if re.search(pattern, code):
                problems.append(f"{number}: {why}: {line.strip()}")
        for command in _COMMANDS:
            if re.search(rf"(^|[\s;|&(`]){command}\b", code) and f"command -v {command}" not in code \
                    and not re.search(rf"\b{command}\b[^|]*\|\|", code):
                problems.append(f"{number}: {command} is GNU's alone (ask command -v or fall back): {line.strip()}")
        for name in empty:
            for m in re.finditer(rf'"\$\{{{name}\[@\]\}}"', code):
                if not code[:m.start()].endswith("[@]+"):
                    problems.append(f'{number}: "${{{name}[@]}}" may be empty (bash 3.2 + set -u): {line.strip()}')
    return problems


@pytest.mark.parametrize("script", SCRIPTS, ids=[str(s.relative_to(ROOT)) for s in SCRIPTS])
def test_scripts_keep_to_bsd_tools_and_bash_3(script: Path) -> None:
    assert portability_problems(script.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("bad, good", [
    ('sed -i "s|a|b|g" "$f"', 'sed -i.bak "s|a|b|g" "$f" && rm "$f.bak"'),
    ("mv -T \"$tmp\" \"$entry\"", "mv \"$tmp\" \"$entry\""),
    ('echo "$(stat -c %Y "$d/used" 2>/dev/null || echo 0)"', 'echo "$(wc -c <"$f")"'),
    ("p=$(readlink -f \"$0\")", "p=$(cd \"$(dirname \"$0\")\" && pwd)"),
    ("date -d yesterday", "date +%s"),
    ("cp -a --reflink=auto a b", "cp -a a b"),
    ("find . -type f -printf '%s %p\\n'", "find . -type f -print0"),
    ('split -b "$limit" -d -a 2 "$f" "$f.part"', 'split -b "$limit" -a 2 "$f" "$f.part"'),
    ("mapfile -t reqs < <(requirements)", "while IFS= read -r r; do reqs+=(\"$r\"); done < <(requirements)"),
    ('echo "${name,,}"', 'echo "$name" | tr A-Z a-z'),
    ("jobs=$(nproc)", "jobs=$(nproc 2>/dev/null || sysctl -n hw.ncpu)"),
    ("sha256sum | cut -c1-12", "if command -v sha256sum >/dev/null; then sha256sum; else shasum -a 256; fi"),
    ('gen=()\ncmake "${gen[@]}"', 'gen=()\ncmake ${gen[@]+"${gen[@]}"}'),
])
def test_the_check_finds_what_it_looks_for(bad: str, good: str) -> None:
    assert portability_problems(bad), bad
    assert portability_problems(good) == [], good


def test_the_check_reads_past_comments_and_heredocs() -> None:
    text = "# sed -i is GNU's\npython - <<'EOF'\nurlopen(url, timeout=60)\nEOF\nmapfile -t x  # portable: never on a Mac\n"
    assert portability_problems(text) == []
