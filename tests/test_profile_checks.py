"""Focused tests of what the profile checks refuse and allow, one concern a
test: ranges, plugin-declared option metadata, sweep names and the cap,
baselines, files and the outside-paths switch, escaping, check_profile's
models. tests/test_profile_hostile.py covers the same ground by volume."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import pytest

from lab.api import Draft, Drafter, Option
from lab.base.limits import MAX_ARMS, MAX_NAME, RUN_RANGES, Range, describe_limits
from lab.hookspecs import hookimpl
from lab.profile.errors import ProfileError, clean
from lab.profile.load import check_profile, load_profile, parse_profile
from lab.registry import load_registry
from tests.fakes import FakeBackend

HEAD = '[run]\nmax_tokens = 16\n\n[[prompts]]\nname = "p"\ntext = "hi"\n'
BASE = '\n[[arms]]\nname = "base"\nbackend = "llamacpp"\nmodel = "embedded:smollm2"\n'


def refused(text: str, registry: Any, path: str = "t.toml") -> ProfileError:
    with pytest.raises(ProfileError) as info:
        parse_profile(text, path, registry)
    return info.value


# -- limits ---------------------------------------------------------------------------


def test_ranges_print_and_name_their_bounds() -> None:
    assert Range(1, 1000).describe() == "1..1_000"
    assert Range(0.01, None).describe() == ">= 0.01"
    assert Range(None, 5).describe() == "<= 5"
    limits = describe_limits()
    assert limits["run.threads"] == RUN_RANGES["threads"].describe()
    assert str(MAX_ARMS) in limits["arms (after sweeps)"]


@pytest.mark.parametrize(
    "line, fragment",
    [
        ("threads = 1000000", "at most 512"),
        ("max_tokens = 1000000000000", "at most 1_048_576"),
        ("temperature = inf", "finite"),
        ("temperature = nan", "finite"),
        ("temperature = -0.5", "at least 0"),
        ("memory_interval_s = inf", "finite"),
        ("memory_interval_s = 0", "at least 0.01"),
        ("n_ctx = 32", "at least 64"),
        ("seed = -1", "at least 0"),
    ],
)
def test_run_values_out_of_range_are_refused(registry, line: str, fragment: str) -> None:
    key = line.split(" = ")[0]
    err = refused(HEAD.replace("max_tokens = 16", f"max_tokens = 16\n{line}" if key != "max_tokens" else line) + BASE, registry)
    assert err.key == f"run.{key}" and err.line == (2 if key == "max_tokens" else 3)
    assert fragment in err.message


def test_run_values_at_their_bounds_are_accepted(registry) -> None:
    lines = "\n".join(f"{k} = {int(r.high) if float(r.high or 0).is_integer() else r.high}" for k, r in RUN_RANGES.items() if r.high)
    p = parse_profile(HEAD.replace("max_tokens = 16", lines) + BASE, "t.toml", registry)
    assert p.run.threads == RUN_RANGES["threads"].high and p.run.rounds == RUN_RANGES["rounds"].high


# -- option metadata plugins declare --------------------------------------------------


@dataclass(frozen=True)
class DeclaredOption(Option):
    """An Option with the attributes the checks read when a plugin declares them."""

    min: float | None = None
    max: float | None = None
    item_type: type | None = None
    requires: Mapping[Any, tuple[str, ...]] | None = None

    __hash__ = object.__hash__


class DeclaringBackend(FakeBackend):
    name = "declaring"
    stack = "declaring"
    options = (
        DeclaredOption("batch", int, None, "batch size", min=1, max=4096),
        DeclaredOption("timeout_s", float, 300.0, "seconds", min=0.5),
        DeclaredOption("args", list, [], "raw arguments", item_type=str),
        DeclaredOption("spec", str, "none", "spec type", requires={"draft": ("draft_model",)}),
        Option("draft_model", str, None, "draft model"),
        Option("plain", int, None, "an int with no declared range"),
    )

    @classmethod
    def is_speculative(cls, arm_options: Mapping[str, Any], drafter: str | None) -> bool:
        return arm_options.get("spec", "none") != "none"


class ReplayDrafter(Drafter):
    name = "replay"
    needs_baseline = True

    def draft(self, context: Sequence[int], k: int) -> Draft:
        return Draft(())


class DeclaringPlugin:
    __name__ = "tests.declaring"

    @hookimpl
    def lab_register_backends(self, register: Callable[[type], None]) -> None:
        register(DeclaringBackend)

    @hookimpl
    def lab_register_drafters(self, register: Callable[[type], None]) -> None:
        register(ReplayDrafter)


@pytest.fixture(scope="module")
def declaring():
    return load_registry(extra_plugins=[DeclaringPlugin()])


def declaring_arm(options: str, name: str = "d", n_max: str = "") -> str:
    return f'\n[[arms]]\nname = "{name}"\nbackend = "declaring"\n{n_max}options = {{ {options} }}\n'


@pytest.mark.parametrize(
    "options, key, fragment",
    [
        ("batch = -1", "arms[0].options.batch", "at least 1"),
        ("batch = 0", "arms[0].options.batch", "at least 1"),
        ("batch = 4097", "arms[0].options.batch", "at most 4_096"),
        ("batch = [8, 10000]", "arms[0].options.batch", "at most 4_096"),
        ("timeout_s = 0", "arms[0].options.timeout_s", "at least 0.5"),
        ("timeout_s = inf", "arms[0].options.timeout_s", "finite"),
        ("args = [1]", "arms[0].options.args[0]", "elements are str"),
        ('args = ["-x", true]', "arms[0].options.args[1]", "elements are str"),
        ("plain = 2147483648", "arms[0].options.plain", "at most 2_147_483_647"),
        ('spec = "draft"', "arms[0].options.spec", "needs option 'draft_model'"),
    ],
)
def test_declared_option_metadata_is_enforced(declaring, options: str, key: str, fragment: str) -> None:
    err = refused(HEAD + declaring_arm(options, n_max="n_max = 3\n"), declaring)
    assert err.key == key, str(err)
    assert fragment in err.message


def test_declared_ranges_print_for_listings() -> None:
    from lab.base.limits import range_note

    by_name = {o.name: o for o in DeclaringBackend.options}
    assert range_note(by_name["batch"]) == " [1..4_096]"
    assert range_note(by_name["timeout_s"]) == " [>= 0.5]"
    assert range_note(by_name["plain"]) == " [-2_147_483_648..2_147_483_647]"
    assert range_note(by_name["spec"]) == ""


def test_declared_ranges_accept_their_bounds(declaring) -> None:
    p = parse_profile(HEAD + declaring_arm('batch = [1, 4096], timeout_s = 0.5, args = ["-x", "1"]'), "t.toml", declaring)
    assert [a.options["batch"] for a in p.arms] == [1, 4096]


def test_requirement_is_checked_per_swept_value(declaring) -> None:
    ok = HEAD + declaring_arm('spec = ["none", "draft"], draft_model = "tiny:llama"', n_max="n_max = 3\n")
    assert len(parse_profile(ok, "t.toml", declaring).arms) == 2
    err = refused(HEAD + declaring_arm('spec = ["none", "draft"]', n_max="n_max = 3\n"), declaring)
    assert err.key == "arms[0].options.spec" and "'draft'" in err.message


def test_a_drafter_that_needs_a_baseline_gets_one_or_is_refused(declaring) -> None:
    spec = '\n[[arms]]\nname = "r"\nbackend = "llamacpp"\nmodel = "embedded:smollm2"\ndrafter = "replay"\nn_max = 3\n'
    err = refused(HEAD + spec, declaring)
    assert err.key == "arms[0].drafter" and "replays its stack's baseline" in err.message
    p = parse_profile(HEAD + BASE + spec, "t.toml", declaring)
    assert p.arm("r").baseline == "base"


def test_the_oracle_declares_it_needs_a_baseline(registry) -> None:
    assert getattr(registry.drafter("oracle"), "needs_baseline", False) is True
    assert not getattr(registry.drafter("ngram"), "needs_baseline", False)


# -- names and sweeps ---------------------------------------------------------------


def test_swept_strings_make_safe_names(registry) -> None:
    arm = (
        '\n[[arms]]\nname = "s"\nbackend = "llamacpp-server"\nmodel = "embedded:smollm2"\nn_max = 3\n'
        'options = { spec_type = "ngram-mod", chat_template_kwargs = ["../../etc", \'{"enable_thinking": false}\', "a/b\\u001b[31m"] }\n'
    )
    p = parse_profile(HEAD + arm, "t.toml", registry)
    names = [a.name for a in p.arms]
    assert names == ["s-chattemplatekwargsetc", "s-chattemplatekwargsenable_thinking_false", "s-chattemplatekwargsa_b_31m"]
    assert p.arms[0].options["chat_template_kwargs"] == "../../etc"  # the value itself is untouched


def test_long_swept_values_are_shortened_with_a_digest(registry) -> None:
    long = ['{"x": "' + "a" * 150 + str(i) + '"}' for i in range(3)]
    values = ", ".join(f"'{v}'" for v in long)
    arm = (
        '\n[[arms]]\nname = "s"\nbackend = "llamacpp-server"\nmodel = "embedded:smollm2"\nn_max = 3\n'
        f'options = {{ spec_type = "ngram-mod", chat_template_kwargs = [{values}] }}\n'
    )
    names = [a.name for a in parse_profile(HEAD + arm, "t.toml", registry).arms]
    assert all(len(n) <= MAX_NAME for n in names) and len(set(names)) == 3


def test_written_names_are_not_shortened(registry) -> None:
    err = refused(HEAD + BASE.replace('name = "base"', f'name = "{"a" * (MAX_NAME + 1)}"'), registry)
    assert err.key == "arms[0].name" and f"at most {MAX_NAME}" in err.message


def test_sweep_cap_counts_before_building(registry) -> None:
    arm = '\n[[arms]]\nname = "ng"\nbackend = "llamacpp"\nmodel = "embedded:smollm2"\ndrafter = "ngram"\n'
    sweep = "n_max = [" + ", ".join(str(i) for i in range(1, 1001)) + "]\n"
    sweep += "drafter_options = { max_ngram = [" + ", ".join(str(i) for i in range(1, 65)) + "] }\n"
    err = refused(HEAD + BASE + arm + sweep, registry)
    assert err.key == "arms[1].n_max" and "64,000 arms" in err.message and str(MAX_ARMS) in err.message
    at_cap = "n_max = [" + ", ".join(str(i) for i in range(1, MAX_ARMS)) + "]\n"
    assert len(parse_profile(HEAD + BASE + arm + at_cap, "t.toml", registry).arms) == MAX_ARMS


# -- baselines ----------------------------------------------------------------------


def test_named_baseline_chains_run_in_order(registry) -> None:
    arms = BASE + "".join(
        f'\n[[arms]]\nname = "{n}"\nbackend = "llamacpp"\nmodel = "embedded:smollm2"\nbaseline = "{b}"\n'
        for n, b in (("c", "b"), ("b", "a"), ("a", "base"))
    )
    p = parse_profile(HEAD + arms, "t.toml", registry)
    assert [a.name for a in p.ordered_arms()] == ["base", "a", "b", "c"]
    assert [a.is_baseline for a in p.arms] == [True, False, False, False]


def test_inferred_baseline_is_a_baseline_arm(registry) -> None:
    """An arm compared to another (baseline = ...) is not picked as a
    speculative arm's baseline, even when it drafts nothing."""
    arms = (
        '\n[[arms]]\nname = "b2"\nbackend = "llamacpp"\nmodel = "embedded:smollm2"\nbaseline = "base"\n'
        + BASE
        + '\n[[arms]]\nname = "ng"\nbackend = "llamacpp"\nmodel = "embedded:smollm2"\ndrafter = "ngram"\nn_max = 3\n'
    )
    assert parse_profile(HEAD + arms, "t.toml", registry).arm("ng").baseline == "base"


# -- files ----------------------------------------------------------------------------


def write(tmp_path: Path, text: str, name: str = "sub/p.toml") -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_prompt_files_resolve_from_the_profile_not_the_working_directory(registry, tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "sub" / "prompts").mkdir(parents=True)
    (tmp_path / "sub" / "prompts" / "essay.txt").write_text("Write about tides.")
    path = write(tmp_path, HEAD.replace('text = "hi"', 'file = "prompts/essay.txt"') + BASE)
    monkeypatch.chdir(tmp_path)
    assert load_profile(path, registry).prompts[0].text == "Write about tides."


def test_outside_paths_need_the_switch(registry, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("LAB_ALLOW_OUTSIDE_PATHS", raising=False)
    (tmp_path / "shared.txt").write_text("Write about tides.")
    for ref in ("../shared.txt", str(tmp_path / "shared.txt")):
        text = HEAD.replace('text = "hi"', f'file = "{ref}"') + BASE
        with pytest.raises(ProfileError) as info:
            load_profile(write(tmp_path, text), registry)
        assert info.value.key == "prompts[0].file" and info.value.line == 6
        assert "allow_outside_paths" in info.value.message
        allowed = text.replace("max_tokens = 16", "max_tokens = 16\nallow_outside_paths = true")
        assert load_profile(write(tmp_path, allowed), registry).prompts[0].text == "Write about tides."
        monkeypatch.setenv("LAB_ALLOW_OUTSIDE_PATHS", "1")
        assert load_profile(write(tmp_path, text), registry).prompts[0].text == "Write about tides."
        monkeypatch.delenv("LAB_ALLOW_OUTSIDE_PATHS")


def test_a_symlink_out_of_the_tree_is_outside(registry, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("LAB_ALLOW_OUTSIDE_PATHS", raising=False)
    (tmp_path / "secret.txt").write_text("not for profiles")
    (tmp_path / "sub").mkdir()
    os.symlink(tmp_path / "secret.txt", tmp_path / "sub" / "link.txt")
    with pytest.raises(ProfileError, match="leads outside"):
        load_profile(write(tmp_path, HEAD.replace('text = "hi"', 'file = "link.txt"') + BASE), registry)


def test_probe_is_checked_when_the_profile_is_read(registry, tmp_path: Path) -> None:
    from lab.base.probe import Probe, save

    text = HEAD.replace("max_tokens = 16", 'max_tokens = 16\nprobe = "probe.json"') + BASE
    with pytest.raises(ProfileError) as info:
        load_profile(write(tmp_path, text), registry)
    assert info.value.key == "run.probe" and "no such file" in info.value.message
    save(Probe("llamacpp", "embedded:smollm2", "decode", (1, 2), ((0.01, 0.012),)), tmp_path / "sub" / "probe.json")
    assert load_profile(write(tmp_path, text), registry).run.probe == "probe.json"


def test_profile_that_is_a_directory_reads_plainly(tmp_path: Path) -> None:
    with pytest.raises(ProfileError) as info:
        load_profile(tmp_path)
    assert "is a directory" in str(info.value) and "Errno" not in str(info.value)


def test_a_utf8_bom_is_accepted(registry, tmp_path: Path) -> None:
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf" + (HEAD + BASE).encode())
    assert load_profile(path, registry).arms[0].name == "base"


# -- messages -------------------------------------------------------------------------


def test_messages_escape_what_the_profile_says(registry) -> None:
    err = refused(HEAD + BASE.replace('backend = "llamacpp"', 'backend = "\\u001b]0;pwned\\u0007\\u202e"'), registry)
    assert "\x1b" not in str(err) and "\x07" not in str(err) and "\u202e" not in str(err)
    assert "\\x1b]0;pwned\\x07\\u202e" in str(err)
    err = refused(HEAD + BASE.replace('name = "base"', 'name = "' + "x" * 5000 + '"'), registry)
    assert len(str(err)) < 400


def test_clean_keeps_printable_text() -> None:
    assert clean("naïve café → ok") == "naïve café → ok"
    assert clean("a\nb\x1b[0m") == "a\\x0ab\\x1b[0m"


def test_error_path_itself_is_escaped(tmp_path: Path) -> None:
    with pytest.raises(ProfileError) as info:
        load_profile(tmp_path / "evil\x1b[2J.toml")
    assert "\x1b" not in str(info.value) and info.value.path.endswith("evil\x1b[2J.toml")


# -- check_profile ----------------------------------------------------------------------


def test_check_profile_refuses_models_that_are_not_there(registry, tmp_path: Path) -> None:
    for model, fragment in (("tiny:nope", "no built-in model"), ("missing.gguf", "no such file"), ("nope:x", "no built-in model")):
        path = write(tmp_path, HEAD + BASE.replace("embedded:smollm2", model))
        load_profile(path, registry)  # reading does not look for models
        with pytest.raises(ProfileError) as info:
            check_profile(path, registry)
        assert info.value.key == "arms[0].model" and info.value.line == 11 and fragment in info.value.message
    (tmp_path / "sub" / "here.gguf").write_bytes(b"GGUF")
    # a model path is read from the profile's directory, like a prompt file
    path = write(tmp_path, HEAD + BASE.replace("embedded:smollm2", "here.gguf"))
    assert check_profile(path, registry).arms[0].model == str(tmp_path / "sub" / "here.gguf")


@pytest.mark.parametrize("name", ["demo", "smoke-llamacpp-server", "smoke-mlx", "smollm2-both-stacks", "smollm2-server"])
def test_shipped_profiles_on_built_in_models_pass_the_check(registry, name: str) -> None:
    root = Path(__file__).resolve().parent.parent / "profiles"
    check_profile(root / f"{name}.toml", registry)


def test_model_paths_resolve_from_the_profile_and_stay_inside_it(registry, tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "sub" / "models").mkdir(parents=True)
    (tmp_path / "sub" / "models" / "t.gguf").write_bytes(b"GGUF")
    (tmp_path / "outside.gguf").write_bytes(b"GGUF")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the working directory plays no part
    drafter = ('\n[[arms]]\nname = "dm"\nbackend = "llamacpp"\nmodel = "models/t.gguf"\ndrafter = "draft-model"\n'
               'n_max = 2\ndrafter_options = { model = "models/t.gguf" }\n')
    path = write(tmp_path, HEAD + BASE.replace("embedded:smollm2", "models/t.gguf") + drafter)
    profile = check_profile(path, registry)
    want = str(tmp_path / "sub" / "models" / "t.gguf")
    assert profile.arms[0].model == want
    assert profile.arms[1].drafter_options["model"] == want  # an option marked model_ref follows the same rule
    for outside, fragment in (("../outside.gguf", "leads outside"), (str(tmp_path / "outside.gguf"), "absolute path"),
                              ("~/m.gguf", "starts with ~")):
        path = write(tmp_path, HEAD + BASE.replace("embedded:smollm2", outside))
        with pytest.raises(ProfileError) as info:
            load_profile(path, registry)
        assert info.value.key == "arms[0].model" and fragment in info.value.message
        assert "allow_outside_paths" in info.value.message
    path = write(tmp_path, HEAD.replace("[run]\n", "[run]\nallow_outside_paths = true\n")
                 + BASE.replace("embedded:smollm2", "../outside.gguf"))
    assert Path(check_profile(path, registry).arms[0].model).resolve() == (tmp_path / "outside.gguf").resolve()
    # registry references are names, not paths
    path = write(tmp_path, HEAD + BASE.replace("embedded:smollm2", "tiny:llama"))
    assert load_profile(path, registry).arms[0].model == "tiny:llama"


def test_a_plugins_check_options_refuses_a_combination_with_file_and_line(tmp_path: Path) -> None:
    from lab.api import Draft, Drafter, Option
    from lab.hookspecs import hookimpl

    class Span(Drafter):
        name = "span-check"
        options = (Option("low", int, 1, min=0), Option("high", int, 4, min=0))

        @classmethod
        def check_options(cls, options: dict[str, Any]) -> list[str]:
            return [] if options["low"] <= options["high"] else ["low must not exceed high"]

        def draft(self, context: Any, k: int) -> Draft:
            return Draft(())

    class Plugin:
        @hookimpl
        def lab_register_drafters(self, register: Any) -> None:
            register(Span)

    registry = load_registry(extra_plugins=[Plugin()])
    arm = ('\n[[arms]]\nname = "s"\nbackend = "llamacpp"\nmodel = "embedded:smollm2"\ndrafter = "span-check"\n'
           'n_max = 2\ndrafter_options = { low = LOW }\n')
    load_profile(write(tmp_path, HEAD + BASE + arm.replace("LOW", "3")), registry)  # 3 <= the default 4
    with pytest.raises(ProfileError) as info:
        load_profile(write(tmp_path, HEAD + BASE + arm.replace("LOW", "[2, 7]")), registry)
    assert info.value.key == "arms[1].drafter_options" and "low must not exceed high" in info.value.message
    assert info.value.line is not None and "low = 7" in info.value.message
