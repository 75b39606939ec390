"""Models named as the hub names them: the reference grammar, the file a
quantization picks, and huggingface_hub itself fetching from a small hub
served on loopback (tests/hubserver.py) into a cache of the test's own:
progress, a cut download resumed, a short disk refused before the first
byte, a filled cache used offline, a reference that does not exist refused
with the repository's files, `lab check` without network once cached, and a
real `lab run` of a hub model on llama.cpp."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from lab.kit import hub, hub_ref, models
from lab.kit.hub_ref import NoSuchFile, choose, parse
from tests.hubserver import TinyHub

GGUF_REPO = "lab-test/SmolLM2-135M-Instruct-GGUF"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MLX_REPO = "lab-test/tiny-qwen3-MLX"
SPLIT = ("Q8_0/SmolLM2-135M-Instruct-Q8_0-00001-of-00002.gguf", "Q8_0/SmolLM2-135M-Instruct-Q8_0-00002-of-00002.gguf")


# -- the grammar and the choice of files: text only ---------------------------------------------


@pytest.mark.parametrize(("text", "repo", "quant", "file"), [
    ("unsloth/Qwen3.8-27B-GGUF:UD-Q4_K_S", "unsloth/Qwen3.8-27B-GGUF", "UD-Q4_K_S", None),
    ("z-lab/Qwen3.8-27B-DFlash2-GGUF:q4_k_m", "z-lab/Qwen3.8-27B-DFlash2-GGUF", "q4_k_m", None),
    ("org/repo/sub/dir/model-Q4_0.gguf", "org/repo", None, "sub/dir/model-Q4_0.gguf"),
    ("mlx-community/Qwen3.8-27B-4bit", "mlx-community/Qwen3.8-27B-4bit", None, None),
    ("z-lab/Qwen3.8-27B-DFlash2", "z-lab/Qwen3.8-27B-DFlash2", None, None),
])
def test_references_parse_as_users_type_them(text: str, repo: str, quant: str | None, file: str | None) -> None:
    ref = parse(text)
    assert ref is not None and (ref.repo, ref.quant, ref.file) == (repo, quant, file)


@pytest.mark.parametrize("text", [
    "models/target.gguf",  # two parts naming a model file: a local path
    "./org/repo", "../org/repo", "/abs/org/repo", "~/models/x.gguf", "target.gguf",
    "embedded:smollm2", "tiny:llama", "synthetic:qwen35-27b",  # the lab's own namespaces
    "org/repo/config.json",  # three parts are a GGUF file or a path
    "org/repo:", "org/:Q4", "-org/repo", "org/repo-", "org--x/repo", "org/re..po", "org/repo/../x.gguf",
])
def test_paths_and_the_labs_own_references_are_no_hub_references(text: str) -> None:
    assert parse(text) is None


LISTING = [
    ("Qwen-Q4_K_S.gguf", 10), ("Qwen-UD-Q4_K_S.gguf", 11), ("Qwen-F16.gguf", 50), ("mmproj-F16.gguf", 2),
    ("mtp-Qwen-Q4_0.gguf", 3), ("Qwen-Q4_0.gguf", 9),
    ("BF16/Qwen-BF16-00001-of-00002.gguf", 60), ("BF16/Qwen-BF16-00002-of-00002.gguf", 40),
    ("Q8_0/Qwen-Q8_0-00001-of-00003.gguf", 1), ("Q8_0/Qwen-Q8_0-00003-of-00003.gguf", 1),
    ("config.json", 1), ("README.md", 1),
]


@pytest.mark.parametrize(("quant", "files"), [
    ("q4_k_s", ("Qwen-Q4_K_S.gguf",)),  # any case; the plain name over the UD one
    ("UD-Q4_K_S", ("Qwen-UD-Q4_K_S.gguf",)),
    ("F16", ("Qwen-F16.gguf",)),  # never the vision projector, never BF16's "...BF16"
    ("Q4_0", ("Qwen-Q4_0.gguf",)),  # the model, not the MTP sidecar
    ("BF16", ("BF16/Qwen-BF16-00001-of-00002.gguf", "BF16/Qwen-BF16-00002-of-00002.gguf")),
])
def test_a_quantization_picks_its_files(quant: str, files: tuple[str, ...]) -> None:
    chosen = choose(parse(f"o/r:{quant}"), LISTING)  # type: ignore[arg-type]
    assert chosen.files == files and chosen.load == files[0]


def test_a_choice_is_refused_with_what_the_repository_holds() -> None:
    with pytest.raises(NoSuchFile, match=r"no GGUF of quantization Q5_K_M; its GGUF files: Qwen-Q4_K_S.gguf \(10 B\)"):
        choose(parse("o/r:Q5_K_M"), LISTING)  # type: ignore[arg-type]
    with pytest.raises(NoSuchFile, match="split GGUF of 3 parts, and the repository lacks .*-00002-of-00003"):
        choose(parse("o/r:Q8_0"), LISTING)  # type: ignore[arg-type]
    with pytest.raises(NoSuchFile, match="o/r has no file nope.gguf; its files: Qwen-Q4_K_S.gguf"):
        choose(parse("o/r/nope.gguf"), LISTING)  # type: ignore[arg-type]
    with pytest.raises(NoSuchFile, match=r"holds GGUF files, not a model directory .* name one as o/r:QUANT"):
        choose(parse("o/r"), LISTING)  # type: ignore[arg-type]
    with pytest.raises(NoSuchFile, match="could be any of a-Q4_0.gguf, b-Q4_0.gguf"):
        choose(parse("o/r:Q4_0"), [("a-Q4_0.gguf", 1), ("b-Q4_0.gguf", 1)])  # type: ignore[arg-type]


def test_a_directory_takes_the_model_files_only() -> None:
    listing = [("config.json", 1), ("model-00001-of-00002.safetensors", 5), ("model-00002-of-00002.safetensors", 5),
               ("model.safetensors.index.json", 1), ("tokenizer.json", 1), ("README.md", 1), ("x-Q4_0.gguf", 3),
               ("images/card.png", 1)]
    chosen = choose(parse("o/r"), listing)  # type: ignore[arg-type]
    assert chosen.load == "" and set(chosen.files) == {
        "config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
        "model.safetensors.index.json", "tokenizer.json"}
    with pytest.raises(NoSuchFile, match=r"no model directory \(it lacks \*.safetensors\)"):
        choose(parse("o/r"), [("config.json", 1), ("README.md", 1)])  # type: ignore[arg-type]


# -- against a hub on loopback -------------------------------------------------------------------


@pytest.fixture(scope="module")
def served() -> Iterator[TinyHub]:
    tiny = models.resolve("tiny:qwen3") if _mlx_written() else None
    server = TinyHub()
    server.add(GGUF_REPO, {
        GGUF_FILE: models.embedded_smollm2(), "README.md": b"# a test repository\n", "config.json": b"{}",
        SPLIT[0]: b"GGUF" + b"\x01" * 2000, SPLIT[1]: b"\x02" * 1000,
    })
    if tiny is not None:
        server.add(MLX_REPO, {**{f.name: f for f in tiny.iterdir() if f.is_file()}, "README.md": b"# tiny\n"})
    server.start()
    yield server
    server.stop()


def _mlx_written() -> bool:
    """tiny:qwen3 can be written here (its writer needs MLX)."""
    try:
        from lab.registry import load_registry

        load_registry()
        models.resolve("tiny:qwen3")
    except Exception:  # noqa: BLE001 - no MLX here: the directory tests skip
        return False
    return True


@pytest.fixture
def hubenv(served: TinyHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TinyHub:
    """The loopback hub as huggingface_hub's endpoint, a fresh cache, online."""
    import huggingface_hub.constants as constants

    monkeypatch.setenv("HF_ENDPOINT", served.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    # huggingface_hub read these when it was imported: no agent look-up at the real hub, online
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    served.requests.clear()
    served.cut.clear()
    return served


def _mb() -> str:
    """The served GGUF's size as the lab writes it."""
    return hub_ref.size_words(models.embedded_smollm2().stat().st_size)


def _fetched(text: str, out: io.StringIO | None = None) -> hub.Plan:
    ref = parse(text)
    assert ref is not None
    return hub.fetch(hub.plan(ref, ask=True), out=out)


def test_a_quantization_is_fetched_into_the_hub_cache_with_progress(hubenv: TinyHub) -> None:
    ref = parse(f"{GGUF_REPO}:q4_1")
    assert ref is not None
    p = hub.plan(ref, ask=True)
    size = models.embedded_smollm2().stat().st_size
    assert [(f.name, f.size, f.local) for f in p.files] == [(GGUF_FILE, size, None)] and p.missing_bytes == size
    seen: list[tuple[str, int, int | None]] = []
    bar = io.StringIO()
    done = hub.fetch(p, out=bar, seen=lambda *a: seen.append(a))
    # huggingface_hub's own cache layout, the file whole
    assert done.path == Path(os.environ["HF_HUB_CACHE"]) / f"models--{GGUF_REPO.replace('/', '--')}" / "snapshots" \
        / hubenv.repos[GGUF_REPO].commit / GGUF_FILE
    assert done.path.read_bytes() == models.embedded_smollm2().read_bytes()
    # progress: rising byte counts up to the file's size, drawn as a bar
    counts = [n for name, n, total in seen if name == GGUF_FILE and total == size]
    assert len(counts) >= 3 and counts == sorted(counts) and counts[-1] == size
    assert GGUF_FILE[-30:] in bar.getvalue() and "100%" in bar.getvalue()
    # resolved again: from the cache, the hub not asked
    hubenv.requests.clear()
    assert models.resolve(f"{GGUF_REPO}:Q4_1") == done.path and hubenv.requests == []


def test_a_split_gguf_comes_whole_and_opens_at_its_first_part(hubenv: TinyHub) -> None:
    path = models.resolve(f"{GGUF_REPO}:Q8_0")
    assert path.name == Path(SPLIT[0]).name and (path.parent / Path(SPLIT[1]).name).read_bytes() == b"\x02" * 1000
    assert models.split_parts(path) == [path, path.parent / Path(SPLIT[1]).name]
    assert models.model_file_bytes(f"{GGUF_REPO}:Q8_0") == 3004


def test_a_cut_download_resumes_where_it_stopped(hubenv: TinyHub) -> None:
    hubenv.cut.add((GGUF_REPO, GGUF_FILE))
    done = _fetched(f"{GGUF_REPO}:Q4_1")
    assert done.path.read_bytes() == models.embedded_smollm2().read_bytes()
    gets = hubenv.downloads(GGUF_FILE)
    # the first request cut midway, the second asking only for the rest
    assert len(gets) == 2 and gets[0][2] == "" and gets[1][2].startswith("bytes=")
    resumed_at = int(gets[1][2][len("bytes="):-1])
    assert 0 < resumed_at < done.files[0].size  # type: ignore[operator]


def test_a_short_disk_is_refused_before_the_first_byte(hubenv: TinyHub, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from lab.cli import main

    monkeypatch.setattr(hub, "free_bytes", lambda path: 50_000_000)
    assert main(["fetch", f"{GGUF_REPO}:Q4_1"]) == 2
    err = capsys.readouterr().err
    assert f"not enough disk: {_mb()} to fetch, 50.00 MB free on the disk of" in err
    assert os.environ["HF_HUB_CACHE"] in err and "nothing was fetched" in err
    with pytest.raises(models.ModelNotFound, match=f"{_mb()} to fetch, 50.00 MB free"):
        models.resolve(f"{GGUF_REPO}:Q4_1")
    assert hubenv.downloads(GGUF_FILE) == []
    assert not (Path(os.environ["HF_HUB_CACHE"]) / f"models--{GGUF_REPO.replace('/', '--')}" / "blobs").exists()


def test_a_filled_cache_works_offline(hubenv: TinyHub, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    import huggingface_hub.constants as constants

    from lab.cli import main

    path = _fetched(f"{GGUF_REPO}:Q4_1").path
    capsys.readouterr()
    hubenv.requests.clear()
    # HF_HUB_OFFLINE=1: nothing asks the hub
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert models.resolve(f"{GGUF_REPO}:Q4_1") == path
    assert main(["fetch", f"{GGUF_REPO}:Q4_1"]) == 0
    out = capsys.readouterr().out
    assert "HF_HUB_OFFLINE is set" in out and "cached" in out and "every file is in the cache" in out
    assert hubenv.requests == []
    # offline, what the cache lacks is refused, saying so
    with pytest.raises(models.ModelNotFound, match="not in the cache, and HF_HUB_OFFLINE is set"):
        models.resolve(f"{GGUF_REPO}:Q8_0")
    assert hubenv.requests == []
    # not set, and the hub unreachable: the cache stands in, and `lab fetch` says so
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    assert models.resolve(f"{GGUF_REPO}:Q4_1") == path
    assert main(["fetch", f"{GGUF_REPO}:Q4_1"]) == 0
    out = capsys.readouterr().out
    assert "cannot be reached" in out and "the cached copy stands" in out


def test_a_reference_that_does_not_exist_is_refused_with_the_files_listed(
        hubenv: TinyHub, capsys: pytest.CaptureFixture[str]) -> None:
    from lab.cli import main

    assert main(["fetch", f"{GGUF_REPO}:Q5_K_M"]) == 2
    err = capsys.readouterr().err
    assert f"{GGUF_REPO} has no GGUF of quantization Q5_K_M; its GGUF files: " in err
    assert f"{GGUF_FILE} ({_mb()})" in err and "nothing was fetched" in err
    assert main(["fetch", f"{GGUF_REPO}/nope.gguf"]) == 2
    err = capsys.readouterr().err
    assert "has no file nope.gguf; its files: " in err and "README.md (20 B)" in err
    assert main(["fetch", "lab-test/no-such-repo:Q4_0"]) == 2
    assert "no such repository lab-test/no-such-repo" in capsys.readouterr().err
    assert main(["fetch", GGUF_REPO]) == 2  # GGUFs named as a directory
    assert f"name one as {GGUF_REPO}:QUANT" in capsys.readouterr().err
    with pytest.raises(models.ModelNotFound, match="no such repository"):
        models.resolve("lab-test/no-such-repo:Q4_0")
    assert hubenv.downloads(GGUF_FILE) == []


def test_a_directory_reference_is_the_model_directory_other_tools_find(hubenv: TinyHub) -> None:
    if MLX_REPO not in hubenv.repos:
        pytest.skip("tiny:qwen3 needs MLX to be written (bash scripts/setup.sh mlx)")
    from huggingface_hub import snapshot_download

    path = models.resolve(MLX_REPO)
    served = hubenv.repos[MLX_REPO].files
    assert sorted(f.name for f in path.iterdir()) == sorted(n for n in served if n != "README.md")
    for name in served:
        if name != "README.md":
            assert (path / name).read_bytes() == Path(served[name].source).read_bytes()  # type: ignore[arg-type]
    # what other tools (mlx-lm) ask the cache for, offline, is the same directory
    assert Path(snapshot_download(MLX_REPO, cache_dir=os.environ["HF_HUB_CACHE"], local_files_only=True,
                                  allow_patterns=["*.json", "model*.safetensors", "*.jinja"])) == path


# -- a profile naming hub models ---------------------------------------------------------------

PROFILE = f"""
[profile]
name = "hub-models"

[run]
max_tokens = 8
rounds = 1
warmup = 0
n_ctx = 512
probe = false

[[prompts]]
name = "p"
text = "Name a river."

[[arms]]
name = "baseline"
backend = "llamacpp"
model = "{GGUF_REPO}:Q4_1"

[[arms]]
name = "dm"
backend = "llamacpp"
model = "{GGUF_REPO}:Q4_1"
drafter = "draft-model"
n_max = 2
drafter_options = {{ model = "{GGUF_REPO}/{GGUF_FILE}" }}
"""


def test_a_profile_keeps_hub_references_and_a_local_path_wins(registry, tmp_path: Path) -> None:
    from lab.profile.load import ProfileError, load_profile

    (tmp_path / "p.toml").write_text(PROFILE)
    p = load_profile(tmp_path / "p.toml", registry)
    assert [a.model for a in p.arms] == [f"{GGUF_REPO}:Q4_1"] * 2
    assert p.arms[1].drafter_options["model"] == f"{GGUF_REPO}/{GGUF_FILE}"
    # a directory spelled like the reference, beside the profile, is what loads
    (tmp_path / GGUF_REPO / GGUF_FILE).mkdir(parents=True)
    p = load_profile(tmp_path / "p.toml", registry)
    assert p.arms[1].drafter_options["model"] == str(tmp_path / GGUF_REPO / GGUF_FILE)
    (tmp_path / "bad.toml").write_text(PROFILE.replace(f"{GGUF_REPO}:Q4_1", f"{GGUF_REPO}:", 1))
    with pytest.raises(ProfileError, match=r"bad.toml:\d+: \[arms\[0\].model\] .*no such file or directory .*and "
                                           r"no hub reference \(org/repo:QUANT"):
        load_profile(tmp_path / "bad.toml", registry, models=True)


@pytest.mark.slow
def test_lab_check_lists_sizes_and_passes_without_network_once_cached(
        hubenv: TinyHub, registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[llamacpp]')")
    import huggingface_hub.constants as constants

    from lab.cli import main

    profile = tmp_path / "p.toml"
    profile.write_text(PROFILE)
    assert main(["check", str(profile)], registry) == 0
    out = capsys.readouterr().out
    assert f"{GGUF_REPO}:Q4_1: 1 file(s), {_mb()}, to fetch" in out
    assert f"to fetch: {_mb()}" in out and f"lab fetch {profile}" in out and ": ok, 2 arms" in out
    assert hubenv.downloads(GGUF_FILE) == []  # check fetches nothing
    # lab fetch: what each arm loads, then the one file both references name, once
    assert main(["fetch", str(profile)], registry) == 0
    out = capsys.readouterr().out
    assert "arm baseline (llamacpp)" in out and "arm dm (llamacpp)" in out and "(as above)" in out
    assert f"{GGUF_FILE}  {_mb()}  to fetch" in out and "opens " + os.environ["HF_HUB_CACHE"] in out
    assert len(hubenv.downloads(GGUF_FILE)) == 1
    # no network at all: the hub gone, then HF_HUB_OFFLINE
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    hubenv.requests.clear()
    for offline in ("", "1"):
        monkeypatch.setenv("HF_HUB_OFFLINE", offline)
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", bool(offline))
        assert main(["check", str(profile)], registry) == 0
        out = capsys.readouterr().out
        assert f"{GGUF_REPO}:Q4_1: 1 file(s), {_mb()}, cached" in out and "to fetch" not in out
    assert hubenv.requests == []


@pytest.mark.engine
@pytest.mark.slow
def test_lab_run_of_a_hub_model_runs_ok_on_llamacpp(served: TinyHub, tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[llamacpp]')")
    served.requests.clear()
    (tmp_path / "p.toml").write_text(PROFILE[:PROFILE.index('[[arms]]\nname = "dm"')])
    env = {**os.environ, "HF_ENDPOINT": served.url, "HF_HUB_CACHE": str(tmp_path / "hub-cache"),
           "HF_HUB_DISABLE_TELEMETRY": "1"}
    env.pop("HF_HUB_OFFLINE", None)
    proc = subprocess.run([sys.executable, "-m", "lab.cli", "run", "p.toml", "--out", "runs"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert f"lab: fetching 1 file(s), {_mb()}" in proc.stderr
    assert len(served.downloads(GGUF_FILE)) == 1
    (run,) = (tmp_path / "runs").iterdir()
    rows = json.loads((run / "results.json").read_text())["results"]
    assert [(r["arm"], r["status"]) for r in rows] == [("baseline", "ok")] and rows[0]["n_tokens"] == 8
