""""What to run": each backend's own command line for an arm
(``Backend.engine_command``), each line parsed by its engine's own parser
where the engine is installed (llama-server itself, mlx-lm's argparse
parser, z-lab's and dflash-mlx's), and the report's choice of a
configuration per stack, held to saved runs in results/."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

import pytest

from lab.api import Backend, EngineCommand
from lab.base.economics import NEUTRAL_BAND
from lab.base.profile import Arm, RunSettings
from lab.kit.command_line import PROMPT
from lab.profile.load import load_profile
from lab.registry import Registry
from lab.render import what_to_run
from lab.render.report import load_for_report, render_markdown
from lab.render.run_summary import what_to_run_text

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
RUN = RunSettings(max_tokens=400, temperature=0.0, n_ctx=8192)
TARGET_Q = "unsloth/Qwen3.8-27B-GGUF:UD-Q4_K_S"
DRAFT_Q = "z-lab/Qwen3.8-27B-DFlash2-GGUF:Q4_K_M"
MLX_TARGET = "mlx-community/Qwen3.8-27B-4bit"
MLX_DRAFT = "z-lab/Qwen3.8-27B-DFlash2"


def arm(backend: str, model: str | None = "embedded:smollm2", n_max: int | None = None, drafter: str | None = None,
        options: Mapping[str, Any] | None = None, drafter_options: Mapping[str, Any] | None = None) -> Arm:
    return Arm(name="a", backend=backend, model=model, drafter=drafter, n_max=n_max, options=dict(options or {}),
               drafter_options=dict(drafter_options or {}), baseline=None, is_baseline=n_max is None,
               stack=backend, group="a")


def command(registry: Registry, a: Arm, run: RunSettings = RUN) -> EngineCommand:
    got = registry.backend(a.backend).engine_command(a, run)
    assert got is not None, f"{a.backend} gives no engine command"
    return got


def flag(argv: tuple[str, ...], name: str) -> str:
    """The value after ``name`` in argv."""
    return argv[argv.index(name) + 1]


# -- the capability -------------------------------------------------------------------


def test_every_builtin_backend_declares_its_engine_command(registry: Registry) -> None:
    default = Backend.engine_command.__func__  # type: ignore[attr-defined]
    bare = [name for name, cls in registry.backends.items()
            if cls.__module__.startswith("lab_") and cls.engine_command.__func__ is default]  # type: ignore[attr-defined]
    assert bare == []


# -- one line per backend kind ------------------------------------------------------------


def test_llamacpp_in_process_baseline_is_llama_server_on_the_same_file(registry: Registry) -> None:
    got = command(registry, arm("llamacpp", options={"n_gpu_layers": 0, "n_batch": 256}))
    argv = got.argv
    assert argv[0] == "llama-server" and Path(flag(argv, "-m")).is_file()
    assert (flag(argv, "-ngl"), flag(argv, "-b"), flag(argv, "-ub"), flag(argv, "-c")) == ("0", "256", "256", "8192")
    assert "--spec-type" not in argv and flag(argv, "--temp") == "0"
    assert any("llama-server" in n for n in got.notes)  # the loop is not the one measured


def test_llamacpp_in_process_draft_model_is_draft_simple(registry: Registry) -> None:
    got = command(registry, arm("llamacpp", n_max=4, drafter="draft-model",
                                drafter_options={"model": "embedded:smollm2", "n_gpu_layers": -1}))
    argv = got.argv
    assert flag(argv, "--spec-type") == "draft-simple" and flag(argv, "--spec-draft-n-max") == "4"
    assert Path(flag(argv, "-md")).is_file() and flag(argv, "--spec-draft-ngl") == "all"


def test_llamacpp_in_process_ngram_is_ngram_simple_with_a_word_on_the_difference(registry: Registry) -> None:
    got = command(registry, arm("llamacpp", n_max=5, drafter="ngram", drafter_options={"max_ngram": 4}))
    assert flag(got.argv, "--spec-type") == "ngram-simple"
    assert (flag(got.argv, "--spec-ngram-simple-size-n"), flag(got.argv, "--spec-ngram-simple-size-m")) == ("4", "5")
    assert any("ngram-simple" in n for n in got.notes)


def test_llamacpp_in_process_oracle_has_no_engine_line(registry: Registry) -> None:
    got = command(registry, arm("llamacpp", n_max=4, drafter="oracle"))
    assert not got.runnable and "oracle" in got.notes[0]


def test_llamacpp_server_names_hub_models_as_llama_server_takes_them(registry: Registry) -> None:
    opts = {"n_gpu_layers": 999, "flash_attn": "on", "batch": 512, "ubatch": 512, "parallel": 1,
            "chat_template_kwargs": '{"enable_thinking": false}'}
    argv = command(registry, arm("llamacpp-server", TARGET_Q, options=opts)).argv
    assert argv[:4] == ("llama-server", "-hf", TARGET_Q, "--no-mmproj")
    assert [flag(argv, f) for f in ("-c", "-ngl", "-fa", "-b", "-ub", "--parallel", "--reasoning")] == \
        ["8192", "999", "on", "512", "512", "1", "off"]
    # none of the lab's own measurement flags
    assert not {"--port", "--metrics", "-lv", "--log-prefix", "--spec-synth-rates"} & set(argv)


def test_llamacpp_dflash_takes_the_draft_by_repository_and_file(registry: Registry) -> None:
    draft = "z-lab/Qwen3.8-27B-DFlash2-GGUF/Qwen3.8-27B-DFlash2-Q4_K_M.gguf"
    target = "unsloth/Qwen3.8-27B-GGUF/Qwen3.8-27B-UD-Q4_K_S.gguf"
    argv = command(registry, arm("llamacpp-dflash", target, n_max=3, options={"draft_model": draft})).argv
    assert argv[1:5] == ("-hf", "unsloth/Qwen3.8-27B-GGUF", "-hff", "Qwen3.8-27B-UD-Q4_K_S.gguf")
    # llama.cpp reads -md as the draft repository's file when -hfd is given (common/arg.cpp)
    assert (flag(argv, "-hfd"), flag(argv, "-md")) == ("z-lab/Qwen3.8-27B-DFlash2-GGUF", "Qwen3.8-27B-DFlash2-Q4_K_M.gguf")
    assert (flag(argv, "--spec-type"), flag(argv, "--spec-draft-n-max")) == ("draft-dflash", "3")


def test_llamacpp_mtp_with_the_head_inside_the_model_and_apart(registry: Registry, tmp_path: Path) -> None:
    inside = command(registry, arm("llamacpp-mtp", TARGET_Q, n_max=2))
    assert flag(inside.argv, "--spec-type") == "draft-mtp" and "-md" not in inside.argv and "-hfd" not in inside.argv
    assert any("mtp-*.gguf" in n for n in inside.notes)
    head = tmp_path / "mtp-Q4_0.gguf"
    head.write_bytes(b"GGUF")
    apart = command(registry, arm("llamacpp-mtp", TARGET_Q, n_max=2, options={"mtp_model": str(head)}))
    assert flag(apart.argv, "-md") == str(head) and not apart.notes


def test_an_attached_server_has_no_line_of_the_labs(registry: Registry) -> None:
    got = command(registry, arm("llamacpp-server", None, options={"url": "http://127.0.0.1:8080"}))
    assert not got.runnable and "8080" in got.notes[0]


def test_mlx_baseline_and_draft_model_are_mlx_lm_generate(registry: Registry) -> None:
    base = command(registry, arm("mlx", MLX_TARGET, options={"enable_thinking": False}))
    assert base.argv[:3] == ("mlx_lm.generate", "--model", MLX_TARGET)
    assert json.loads(flag(base.argv, "--chat-template-config")) == {"enable_thinking": False}
    assert base.argv[-2:] == ("--prompt", PROMPT) and "--draft-model" not in base.argv
    spec = command(registry, arm("mlx", MLX_TARGET, n_max=3, drafter="draft-model",
                                 drafter_options={"model": "mlx-community/Qwen3-0.6B-4bit"}))
    assert (flag(spec.argv, "--draft-model"), flag(spec.argv, "--num-draft-tokens")) == ("mlx-community/Qwen3-0.6B-4bit", "3")


def test_an_mlx_arm_on_a_gguf_has_no_mlx_lm_line(registry: Registry) -> None:
    got = command(registry, arm("mlx", "embedded:smollm2"))
    assert not got.runnable and "GGUF" in got.notes[0]


def test_mlx_dflash_is_zlabs_dflash_generate_at_block_n_max_plus_one(registry: Registry) -> None:
    got = command(registry, arm("mlx-dflash", MLX_TARGET, n_max=4, options={"draft": MLX_DRAFT, "block_size": 3,
                                                                           "draft_bits": 4}))
    argv = got.argv
    assert argv[:5] == ("python", "-m", "dflash.cli", "generate", "mlx")
    # n_max wins over the arm's block: a predicted n_max carries its block with it
    assert (flag(argv, "--block-size"), flag(argv, "--draft-bits"), flag(argv, "--draft")) == ("5", "4", MLX_DRAFT)
    assert argv[-1] == PROMPT


def test_mlx_mtp_has_no_engine_line(registry: Registry) -> None:
    got = command(registry, arm("mlx-mtp", MLX_TARGET, n_max=2, options={"mtp": MLX_TARGET}))
    assert not got.runnable and "MTP" in got.notes[0]


def test_mlx_lm_writes_the_drafted_tokens_out(registry: Registry) -> None:
    plain = command(registry, arm("mlx-lm", MLX_TARGET))
    assert "--num-draft-tokens" not in plain.argv and flag(plain.argv, "--max-tokens") == "400"
    # its CLI drafts 3 by default, its Python function 2: the line never leaves it to either
    spec = command(registry, arm("mlx-lm", MLX_TARGET, options={"draft_model": "mlx-community/Qwen3-0.6B-4bit"}))
    assert flag(spec.argv, "--num-draft-tokens") == "2"
    wider = command(registry, arm("mlx-lm", MLX_TARGET, n_max=5, options={"draft_model": "mlx-community/Qwen3-0.6B-4bit",
                                                                          "num_draft_tokens": 5}))
    assert flag(wider.argv, "--num-draft-tokens") == "5"


def test_zlab_dflash_line_and_its_local_draft_note(registry: Registry, tmp_path: Path) -> None:
    hub = command(registry, arm("zlab-dflash", MLX_TARGET, n_max=2, options={"draft": MLX_DRAFT, "draft_bits": 4,
                                                                            "enable_thinking": False}))
    assert (flag(hub.argv, "--block-size"), flag(hub.argv, "--reasoning")) == ("3", "off") and not hub.notes
    local = command(registry, arm("zlab-dflash", MLX_TARGET, n_max=2, options={"draft": str(tmp_path)}))
    assert flag(local.argv, "--draft") == str(tmp_path) and "hub repository id" in local.notes[0]


def test_dflash_mlx_line_caps_the_verify_at_the_block(registry: Registry) -> None:
    got = command(registry, arm("dflash-mlx", MLX_TARGET, n_max=4, options={"draft": MLX_DRAFT, "verify_mode": "dflash",
                                                                           "draft_quant": "w4:gs64"}))
    argv = got.argv
    assert argv[:4] == ("python", "-m", "dflash_mlx.cli", "generate")
    assert (flag(argv, "--verify-mode"), flag(argv, "--verify-len-cap"), flag(argv, "--draft-quant")) == \
        ("dflash", "5", "w4:gs64")
    assert "--block-size" not in argv and any("verify-len-cap" in n for n in got.notes)


def test_vllm_line_is_vllm_serve_with_the_speculative_config(registry: Registry) -> None:
    got = command(registry, arm("vllm", "org/model", n_max=3, options={"spec_method": "ngram", "prompt_lookup_max": 3}))
    argv = got.argv
    assert argv[:3] == ("vllm", "serve", "org/model")
    assert json.loads(flag(argv, "--speculative-config")) == {"method": "ngram", "num_speculative_tokens": 3,
                                                              "prompt_lookup_max": 3}
    assert "--per-request-spec-decode-metrics" not in argv and "--port" not in argv


def test_a_line_quotes_what_a_shell_would_split(registry: Registry) -> None:
    got = command(registry, arm("mlx-lm", MLX_TARGET, options={"enable_thinking": False}))
    assert tuple(shlex.split(got.line())) == got.argv


# -- each line through its engine's own parser ---------------------------------------------


def _writeup_arms(registry: Registry, name: str) -> list[tuple[Arm, RunSettings]]:
    profile = load_profile(str(ROOT / "profiles" / f"writeup-{name}.toml"), registry)
    return [(a, profile.run) for a in profile.arms]


def _llama_cases(registry: Registry, tmp_path: Path) -> list[EngineCommand]:
    head = tmp_path / "mtp-Q4_0.gguf"
    head.write_bytes(b"GGUF")
    arms = [*_writeup_arms(registry, "llamacpp-dflash"), *_writeup_arms(registry, "llamacpp-mtp")]
    arms += [(a, p.run) for p in [load_profile(str(ROOT / "profiles" / "demo.toml"), registry)] for a in p.arms]
    arms += [(arm("llamacpp-mtp", TARGET_Q, n_max=2, options={"mtp_model": str(head), "draft_ngl": 99}), RUN),
             (arm("llamacpp-dflash", "a/b/c.gguf", n_max=7, options={"draft_model": "d/e/f.gguf", "draft_p_min": 0.5}), RUN),
             (arm("llamacpp-server", TARGET_Q, n_max=4, options={"spec_type": "ngram-mod", "concurrency": 2,
                                                                "chat_template_kwargs": '{"x": 1}'}), RUN),
             (arm("llamacpp", n_max=4, drafter="ngram", options={"extra_bufts": False}), RUN)]
    got = [registry.backend(a.backend).engine_command(a, run) for a, run in arms]
    return [c for c in got if c is not None and c.runnable]


def _llama_server() -> str:
    from lab.kit.llama_tools import find_llama_tool

    found = find_llama_tool("llama-server")
    if found is None:
        pytest.skip("no llama-server here (bash scripts/build_llama.sh tools)")
    return found[0]


def _listed_flags(help_text: str) -> set[str]:
    """Every flag name a --help lists: the leading "-a, --b" of its lines."""
    flags = set()
    for ln in help_text.splitlines():
        for tok in re.split(r",\s*|\s+", ln.strip()):
            if not tok.startswith("-"):
                break
            flags.add(tok)
    return flags


@pytest.mark.slow
def test_every_llama_server_line_parses_with_llama_server_itself(registry: Registry, tmp_path: Path) -> None:
    server = _llama_server()
    listed = _listed_flags(subprocess.run([server, "--help"], capture_output=True, text=True, timeout=60).stdout)
    lines = _llama_cases(registry, tmp_path)
    assert len(lines) >= 10
    for c in lines:
        assert c.argv[0] == "llama-server"
        used = {t for t in c.argv[1:] if t.startswith("-") and not t.lstrip("-").replace(".", "").isdigit()}
        assert used <= listed, f"not in llama-server --help: {used - listed} ({c.line()})"
        # its own parser: every flag and value is read, then --help exits 0 before any model loads
        done = subprocess.run([server, *c.argv[1:], "--help"], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{c.line()}\n{done.stderr[-600:]}"


@pytest.mark.slow
def test_llama_servers_parser_refuses_what_it_does_not_know() -> None:
    server = _llama_server()
    done = subprocess.run([server, "--spec-type", "draft-dflash", "--spec-draft-n-maxx", "3", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "--spec-draft-n-maxx" in done.stderr + done.stdout


def _mlx_lines(registry: Registry) -> list[EngineCommand]:
    arms = [(a, run) for a, run in _writeup_arms(registry, "mlx-dflash") if a.backend in ("mlx", "mlx-lm")]
    arms += [(arm("mlx-lm", MLX_TARGET, n_max=4, options={"draft_model": "x/draft", "kv_bits": 4}), RUN),
             (arm("mlx", MLX_TARGET, n_max=3, drafter="draft-model", drafter_options={"model": "x/draft"}), RUN),
             (arm("mlx-lm", MLX_TARGET), replace(RUN, chat_template=False, temperature=0.7))]
    return [command(registry, a, run) for a, run in arms]


@pytest.mark.slow
def test_every_mlx_lm_line_parses_with_mlx_lms_own_parser(registry: Registry) -> None:
    generate = pytest.importorskip("mlx_lm.generate", reason="mlx-lm is not installed (bash scripts/setup.sh mlx)")
    parser = generate.setup_arg_parser()
    lines = _mlx_lines(registry)
    assert len(lines) >= 4
    for c in lines:
        assert c.argv[0] == "mlx_lm.generate"
        args = parser.parse_args(list(c.argv[1:]))
        assert args.model == flag(c.argv, "--model") and args.prompt == PROMPT
        assert args.max_tokens == int(flag(c.argv, "--max-tokens"))
        if "--draft-model" in c.argv:
            assert args.num_draft_tokens == int(flag(c.argv, "--num-draft-tokens"))
        if args.chat_template_config is not None:
            assert json.loads(args.chat_template_config) == {"enable_thinking": False}
    with pytest.raises(SystemExit):
        parser.parse_args([*lines[0].argv[1:], "--draft-tokenz", "3"])


@pytest.mark.slow
def test_every_zlab_line_parses_with_zlabs_own_parser(registry: Registry) -> None:
    cli = pytest.importorskip("dflash.cli", reason="z-lab's dflash is not installed (pip install --no-deps dflash==0.1.0)")
    if not hasattr(cli, "_parser"):
        pytest.skip("this dflash package is not z-lab's (dflash-mlx's owns the name)")
    parser = cli._parser()
    lines = [command(registry, a, run) for a, run in _writeup_arms(registry, "mlx-dflash")
             if a.backend in ("mlx-dflash", "zlab-dflash")]
    assert len(lines) == 4
    for c in lines:
        assert c.argv[:3] == ("python", "-m", "dflash.cli")
        args = parser.parse_args(list(c.argv[3:]))
        assert (args.command, args.backend, args.prompt) == ("generate", "mlx", PROMPT)
        assert (args.block_size, args.draft_bits, args.reasoning) == (int(flag(c.argv, "--block-size")), 4, "off")
        assert args.max_new_tokens == 400 and args.draft == MLX_DRAFT


@pytest.mark.slow
def test_every_dflash_mlx_line_runs_through_its_own_cli(registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("dflash_mlx", reason="dflash-mlx is not installed (pip install dflash-mlx==0.1.8)")
    from dflash_mlx import cli
    from dflash_mlx import generate as dflash_generate

    seen: list[dict[str, Any]] = []

    def caught(**kwargs: Any) -> int:
        seen.append(kwargs)
        return 0

    # its own dispatch and parser, its own option checks; only the generation is not run
    monkeypatch.setattr(dflash_generate, "run_generate", caught)
    monkeypatch.setattr(dflash_generate, "apply_metal_limits", lambda: None)
    for n_max, opts in ((4, {"verify_mode": "dflash", "draft_quant": "w4:gs64"}), (None, {}),
                        (2, {"verify_len_cap": 2, "prefill_step_size": 512})):
        c = command(registry, arm("dflash-mlx", MLX_TARGET, n_max=n_max, options={"draft": MLX_DRAFT, **opts}))
        assert c.argv[:3] == ("python", "-m", "dflash_mlx.cli")
        assert cli.run(list(c.argv[3:])) == 0, c.line()
        got = seen[-1]
        assert (got["model_ref"], got["draft_ref"], got["prompt"], got["max_tokens"]) == (MLX_TARGET, MLX_DRAFT, PROMPT, 400)
        assert got["verify_len_cap"] == (int(flag(c.argv, "--verify-len-cap")) if "--verify-len-cap" in c.argv else 0)
    assert cli.run(["generate", "--model", MLX_TARGET, "--prompt", "x", "--block-size", "3"]) != 0


@pytest.mark.engine
@pytest.mark.slow
def test_every_vllm_line_parses_with_vllm_serves_own_parser(registry: Registry) -> None:
    pytest.importorskip("vllm", reason="vLLM is not installed (bash scripts/setup.sh vllm)")
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser())
    for a in (arm("vllm", "org/model"), arm("vllm", "org/model", n_max=3, options={"spec_method": "ngram",
                                                                                    "prompt_lookup_max": 3}),
              arm("vllm", "org/model", n_max=4, options={"spec_method": "draft_model", "draft_model": "org/draft",
                                                         "max_model_len": 4096, "enforce_eager": False})):
        c = command(registry, a)
        assert c.argv[:2] == ("vllm", "serve")
        args = parser.parse_args(list(c.argv[2:]))
        assert args.model_tag == a.model and args.max_model_len == int(flag(c.argv, "--max-model-len"))
        if "--speculative-config" in c.argv:
            assert args.speculative_config["num_speculative_tokens"] == a.n_max


# -- choosing what to run, on saved runs ---------------------------------------------------


def _advice(run: str) -> dict[str, what_to_run.StackAdvice]:
    return {a.stack: a for a in what_to_run.advise(load_for_report(RESULTS / run))}


def test_a_stack_where_nothing_pays_gets_its_baselines_line() -> None:
    """The H200 draft-model run: on llama-server the 1B draft is a structural
    loss (docs/findings.md), so its stack says to run the baseline."""
    advice = _advice("draft-model-h200/draft-run")["llamacpp-server"]
    assert advice.pick is None and advice.baseline is not None
    assert advice.best_loser is not None and advice.best_loser.overall < 1 + NEUTRAL_BAND
    assert advice.baseline_command is not None and "--spec-type" not in advice.baseline_command.argv
    assert set(advice.baseline_tok_s) == {"prose", "code"}


def test_a_prediction_is_picked_only_past_what_it_missed_by() -> None:
    advice = _advice("draft-model-h200/draft-run")["llamacpp"]
    pick, measured = advice.pick, advice.runner_up
    assert pick is not None and measured is not None
    assert pick.how == what_to_run.PREDICTED and measured.how == what_to_run.MEASURED
    assert pick.miss is not None and pick.overall > measured.overall * (1 + max(NEUTRAL_BAND, pick.miss))
    assert pick.command is not None and flag(pick.command.argv, "--spec-draft-n-max") == str(pick.n_max)
    assert pick.n_max != measured.n_max


def test_a_prediction_that_does_not_clear_its_miss_is_not_picked(monkeypatch: pytest.MonkeyPatch) -> None:
    real = what_to_run._predicted

    def wide_miss(*args: Any, **kwargs: Any) -> list[what_to_run.Choice]:
        return [replace(c, miss=0.5) for c in real(*args, **kwargs)]

    monkeypatch.setattr(what_to_run, "_predicted", wide_miss)
    advice = _advice("draft-model-h200/draft-run")["llamacpp"]
    assert advice.pick is not None and advice.pick.how == what_to_run.MEASURED and advice.runner_up is None


def test_oracle_and_set_acceptance_arms_are_never_what_to_run() -> None:
    demo = _advice("demo-predictions-cpu")["llamacpp"]
    assert demo.pick is None or "oracle" not in demo.pick.arm
    assert any("replays" in n and "oracle" in n for n in demo.notes)
    twins = _advice("twins-h100/dflash-run")["llamacpp-server"]
    assert twins.pick is None and any("set by the profile" in n for n in twins.notes)


def test_the_report_and_lab_runs_summary_end_in_what_to_run() -> None:
    data = load_for_report(RESULTS / "draft-model-h200" / "draft-run")
    text = render_markdown(data)
    tail = text[text.index("## What to run"):]
    assert "\n## " not in tail and "### llamacpp-server" in tail and "```sh\nllama-server " in tail
    summary = what_to_run_text(RESULTS / "draft-model-h200" / "draft-run")
    assert summary.lstrip().startswith("What to run") and "\n    llama-server -m " in summary


def test_a_run_directory_that_cannot_be_read_costs_the_summary_nothing(tmp_path: Path) -> None:
    assert what_to_run_text(None) == ""
    said = what_to_run_text(tmp_path / "missing")
    assert "not worked out" in said


LAB_RUN_PROFILE = """
[profile]
name = "what-to-run"

[run]
max_tokens = 24
rounds = 1
warmup = 0
n_ctx = 1024
threads = 1
probe = false

[[prompts]]
name = "prose"
text = "Write two sentences about rivers."

[[arms]]
name = "baseline"
backend = "llamacpp"
model = "embedded:smollm2"

[[arms]]
name = "ngram"
backend = "llamacpp"
model = "embedded:smollm2"
drafter = "ngram"
n_max = 3
"""


@pytest.mark.slow
def test_lab_run_prints_what_to_run_after_its_table_and_report_md_ends_in_it(tmp_path: Path) -> None:
    import sys

    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (bash scripts/setup.sh llamacpp)")
    (tmp_path / "p.toml").write_text(LAB_RUN_PROFILE)
    done = subprocess.run([sys.executable, "-m", "lab.cli", "run", "p.toml", "--out", "runs", "--quiet"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    table, said, saved = out.index("verdict"), out.index("What to run"), out.index("saved:")
    assert table < said < saved
    block = out[said:saved]
    assert "llamacpp:" in block and "\n    llama-server -m " in block
    line = next(ln.strip() for ln in block.splitlines() if ln.strip().startswith("llama-server "))
    run_dir = next((tmp_path / "runs").iterdir())
    report = (run_dir / "report.md").read_text()
    assert report.rstrip().endswith("```") or report.rstrip().splitlines()[-1].startswith("- ")
    assert report.index("## What to run") > report.index("## Detail") and line in report
    from lab.kit.llama_tools import find_llama_tool

    found = find_llama_tool("llama-server")
    if found is not None:  # the printed line, through llama-server's own parser
        parsed = subprocess.run([found[0], *shlex.split(line)[1:], "--help"], capture_output=True, text=True, timeout=60)
        assert parsed.returncode == 0, parsed.stderr[-600:]


PAST_THE_BLOCK = """
[profile]
name = "past-the-block"

[run]
max_tokens = 16
rounds = 1
warmup = 0
n_ctx = 512
threads = 1
probe = false

[[prompts]]
name = "p"
text = "Count to ten."

[[arms]]
name = "baseline"
backend = "llamacpp-server"
model = "tiny:llama"

[[arms]]
name = "dflash"
backend = "llamacpp-dflash"
model = "tiny:llama"
n_max = [3, 16]
options = { draft_model = "tiny:llama-dflash" }
"""


@pytest.mark.slow
@pytest.mark.engine
def test_an_n_max_past_the_drafts_block_ends_as_error_with_the_block_named(tmp_path: Path) -> None:
    """What docs/mac.md says the write-ups' n-max 12 row will read: the lab
    reads the draft's trained block (the tiny DFlash draft's is 16) and
    refuses n_max past it at load, before a server starts; the row is an
    error that names the largest n_max, and What to run says it has none."""
    import sys

    _llama_server()
    (tmp_path / "p.toml").write_text(PAST_THE_BLOCK)
    done = subprocess.run([sys.executable, "-m", "lab.cli", "run", "p.toml", "--out", "runs", "--quiet"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    run_dir = next((tmp_path / "runs").iterdir())
    rows = {r["arm"]: r for r in json.loads((run_dir / "results.json").read_text())["results"]}
    assert rows["dflash-nmax3"]["status"] == "ok", done.stderr
    past = rows["dflash-nmax16"]
    assert past["status"] == "error" and "more than this draft can propose" in past["detail"]
    assert "set n_max <= 15" in past["detail"]
    assert not list(run_dir.glob("llama-server-dflash-nmax16*.log"))  # no server was started for it
    assert "dflash-nmax16 has no speedup to offer: error" in done.stdout


def test_the_mac_pages_lines_are_the_ones_the_lab_prints(registry: Registry) -> None:
    """docs/mac.md shows What to run for the write-ups' profiles: its lines
    are engine_command's own for those arms, not copies that drift."""
    page = (ROOT / "docs" / "mac.md").read_text(encoding="utf-8")
    fenced = "\n".join(re.findall(r"^```.*?\n(.*?)^```", page, re.S | re.M))
    shown = {ln.strip() for ln in fenced.splitlines() if ln.strip().startswith(("llama-server ", "python -m dflash"))}
    dflash = {a.name: (a, run) for a, run in _writeup_arms(registry, "llamacpp-dflash")}
    mlx = {a.name: (a, run) for a, run in _writeup_arms(registry, "mlx-dflash")}
    expected = {command(registry, *dflash["baseline"]).line(), command(registry, *mlx["zlab-dflash2-bs3"]).line()}
    assert shown == expected
