"""A baseline against its engine's own tool (``[run] reference = true``):
when the runner measures it (after the arm's cells, never beside one), how
results.json keeps it, the report's line and its warning beyond 3 %, the
profile key's refusals, and the real thing: llama-bench tg for an
in-process arm and a bare /completion to a real llama-server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping

import pytest

from lab.api import Backend, Generation, GenerationRequest, Option, Referencing
from lab.base.events import Emit, ReferenceMeasured, StatusChanged
from lab.hookspecs import hookimpl
from lab.profile.errors import ProfileError
from lab.profile.load import parse_profile
from lab.registry import load_registry
from lab.render import conditions
from lab.render.report import ReportWriter, render_markdown
from lab.runner import Runner
from lab.store import RunStore, load_run
from tests.fakes import FakeBackend

# -- when it runs, what is kept, what the report says (a backend of our own) ------------------------------


class ReferencedFake(FakeBackend, Referencing):
    """The fake engine with a reference whose figure the profile sets."""

    name = "referenced"
    stack = "referenced"
    options = (
        *FakeBackend.options,
        Option("reference_tok_s", float, 100.0, "the figure its reference reports"),
        Option("reference_needs_load", bool, True, "measured before close (else after)"),
    )
    timeline: ClassVar[list[str]] = []

    @classmethod
    def reference_tool(cls, arm_options: Mapping[str, Any]) -> str | None:
        return "fake-bench"

    def generate(self, request: GenerationRequest, emit: Emit, cancelled: Callable[[], bool]) -> Generation:
        ReferencedFake.timeline.append(f"cell {self.arm.name} r{request.cell.round}")
        return super().generate(request, emit, cancelled)

    def close(self) -> None:
        ReferencedFake.timeline.append(f"close {self.arm.name}")
        super().close()

    def reference_needs_load(self) -> bool:
        return bool(self.opts.get("reference_needs_load", True))

    def measure_reference(self, request: GenerationRequest, prompt_tokens: int | None) -> dict[str, Any]:
        ReferencedFake.timeline.append(f"reference {self.arm.name} {'closed' if self.closed else 'loaded'}")
        return {"tool": "fake-bench", "tok_per_s": float(self.opts.get("reference_tok_s", 100.0)),
                "counts": "tokens", "n_tokens": request.max_tokens, "command": f"fake-bench -n {request.max_tokens}",
                "settings": {"depth": prompt_tokens}}


class Plugin:
    @staticmethod
    @hookimpl
    def lab_register_backends(register: Callable[[type[Backend]], None]) -> None:
        register(ReferencedFake)
        register(FakeBackend)


def _profile(arms: str, reference: bool = True) -> str:
    return (f"[run]\nmax_tokens = 12\nrounds = 2\nwarmup = 1\nprobe = false\nreference = {str(reference).lower()}\n"
            '[[prompts]]\nname = "first"\ntext = "a"\n[[prompts]]\nname = "second"\ntext = "b"\n' + arms)


def _arm(name: str, backend: str = "referenced", **options: Any) -> str:
    inline = ", ".join(f"{k} = {json.dumps(v)}" for k, v in {"virtual_clock": True, **options}.items())
    return f'[[arms]]\nname = "{name}"\nbackend = "{backend}"\noptions = {{ {inline} }}\n'


def _run(tmp_path: Path, text: str) -> tuple[list[Any], Path, list[Any]]:
    registry = load_registry(extra_plugins=[Plugin])
    profile = parse_profile(text, str(tmp_path / "p.toml"), registry)
    store = RunStore(profile, tmp_path / "runs")
    heard: list[Any] = []
    rows = Runner(profile, registry, store, [ReportWriter(), heard.append]).run()
    return rows, store.path, heard


@pytest.mark.slow
def test_the_reference_runs_after_the_arms_cells_and_before_the_next_arm(tmp_path: Path) -> None:
    ReferencedFake.timeline.clear()
    text = _profile(_arm("server-like") + _arm("bench-like", reference_needs_load=False)
                    + _arm("spec", speculative=True) + 'n_max = 3\nbaseline = "server-like"\n')
    rows, run_dir, heard = _run(tmp_path, text)
    assert all(r["status"] == "ok" for r in rows)
    t = ReferencedFake.timeline
    # a reference needing the engine comes after its group's last cell (the arm held to it runs
    # beside it, paired), before close; one that loads the model itself comes after close,
    # before the next group's first cell
    last_cell = max(i for i, x in enumerate(t) if x.startswith(("cell server-like", "cell spec")))
    assert t.index("reference server-like loaded") == last_cell + 1
    assert t.index("close server-like") == t.index("reference server-like loaded") + 1
    assert t.index("reference bench-like closed") == t.index("close bench-like") + 1
    assert max(i for i, x in enumerate(t) if x.startswith("cell spec")) < t.index("cell bench-like r0")
    # no reference for the speculative arm: only baselines have one
    assert not any(x.startswith("reference spec") for x in t)
    progress = [e for e in heard if isinstance(e, ReferenceMeasured)]
    assert [(e.arm, e.done) for e in progress] == [("server-like", False), ("server-like", True),
                                                   ("bench-like", False), ("bench-like", True)]
    # no arm status after the arm ended: the TUI's lanes stay finished
    after = heard.index(progress[0])
    assert not any(isinstance(e, StatusChanged) and e.cell.arm == "server-like" for e in heard[after:])
    data = load_run(run_dir)
    refs = data["machine"]["references"]
    assert set(refs) == {"server-like", "bench-like"}
    assert refs["server-like"]["command"] == "fake-bench -n 12" and refs["server-like"]["prompt"] == "first"
    assert refs["server-like"]["when"] == "after the arm's cells, its engine still loaded"
    assert refs["bench-like"]["when"] == "after the arm's cells, its engine closed"
    assert refs["bench-like"]["settings"]["depth"] == rows[0]["prompt_tokens"]
    # the noise guard watched it as it watches a cell
    assert isinstance(refs["bench-like"]["contention"], float) and isinstance(refs["bench-like"]["contended"], bool)


def test_a_reference_taken_on_a_busy_machine_says_so() -> None:
    machine = _machine(100.0, counts="tokens")
    machine["references"]["base"].update(contended=True, contention_note="other processes used 1.80 cores (0 spare)")
    lines = conditions.reference_lines(_rows(100.0), machine)
    assert any("⚠ the machine was busy while the reference ran (other processes used 1.80 cores" in ln for ln in lines)
    assert not any("busy" in ln for ln in conditions.reference_lines(_rows(100.0), _machine(100.0, counts="tokens")))


def _rows(tok_per_s: float, arm: str = "base") -> list[dict[str, Any]]:
    return [{"arm": arm, "prompt": "first", "round": r, "status": "ok", "n_tokens": 400, "tok_per_s": tok_per_s + d,
             "gen_s": 400 / (tok_per_s + d)} for r, d in ((1, -1.0), (2, 1.0))]


def _machine(tok_per_s: float, counts: str = "decodes") -> dict[str, Any]:
    return {"references": {"base": {"tool": "llama-bench tg", "prompt": "first", "tok_per_s": tok_per_s,
                                    "counts": counts, "n_tokens": 400, "command": "llama-bench -n 400",
                                    "when": "after the arm's cells, its engine closed"}}}


@pytest.mark.parametrize(("reference", "warned"), [(100.0, False), (103.0, False), (103.5, True), (110.0, True)])
def test_a_warning_exactly_when_the_reference_is_more_than_3_percent_faster(reference: float, warned: bool) -> None:
    # recorded figures: a baseline of 100 tok/s (its two rounds 99 and 101), counted as tokens
    lines = conditions.reference_lines(_rows(100.0), _machine(reference, counts="tokens"))
    assert lines[0].startswith(f"- base: baseline 100.0 tok/s = {100 / reference:.2f} of llama-bench tg 400 "
                               f"({reference:.1f} tok/s)"), lines
    assert any("⚠" in ln for ln in lines) is warned, lines
    # the faster engine never warns
    assert not any("⚠" in ln for ln in conditions.reference_lines(_rows(100.0), _machine(90.0, counts="tokens")))


def test_llama_bench_is_compared_decode_for_decode() -> None:
    # llama-bench tg N times N decodes; the lab's tok_per_s puts n tokens over
    # n - 1 decodes (the first came with the prompt): compared as decodes
    rows = [{"arm": "base", "prompt": "first", "round": 1, "status": "ok", "n_tokens": 5, "tok_per_s": 50.0, "gen_s": 0.1}]
    lines = conditions.reference_lines(rows, _machine(40.0))
    assert lines[0].startswith("- base: baseline 40.0 tok/s = 1.00 of llama-bench tg 400"), lines


@pytest.mark.slow
def test_the_report_shows_the_reference_in_conditions_and_a_failed_one_says_why(tmp_path: Path) -> None:
    rows, run_dir, _ = _run(tmp_path, _profile(_arm("base", reference_tok_s=1e6)))
    md = (run_dir / "report.md").read_text()
    conditions_part = md.split("## Conditions", 1)[1].split("## Detail", 1)[0]
    assert "Baselines against the engine's own tool:" in conditions_part
    assert "of fake-bench of 12 tokens (1000000.0 tok/s)" in conditions_part
    assert "⚠ base: the lab's baseline decodes" in conditions_part
    data = load_run(run_dir)
    failed = {**data, "machine": {"references": {"base": {"tool": "llama-bench tg", "error": "llama-bench exited 1"}}},
              "steps": [], "probe": None}
    assert "- base: no reference (llama-bench tg): llama-bench exited 1" in render_markdown(failed)
    # a run that asked for none has no such section
    assert "engine's own tool" not in render_markdown({**data, "machine": {}, "steps": [], "probe": None})


def test_the_profile_key_is_checked_with_file_line_and_key(tmp_path: Path) -> None:
    registry = load_registry(extra_plugins=[Plugin])
    with pytest.raises(ProfileError) as bad_type:
        parse_profile(_profile(_arm("base")).replace("reference = true", 'reference = "yes"'), "p.toml", registry)
    assert str(bad_type.value).startswith("p.toml:6: [run.reference] expected bool"), str(bad_type.value)
    with pytest.raises(ProfileError) as none_can:
        parse_profile(_profile(_arm("base", backend="fake")), "p.toml", registry)
    text = str(none_can.value)
    assert text.startswith("p.toml:6: [run.reference] no baseline arm") and "baseline backends: fake" in text, text
    # off (the default), the same profile is fine
    parse_profile(_profile(_arm("base", backend="fake"), reference=False), "p.toml", registry)


# -- the real engines -----------------------------------------------------------------------------------------


def _llama_ready() -> str:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return "llama-cpp-python is not installed (pip install -e '.[llamacpp]')"
    from lab.kit.llama_tools import find_llama_tool

    missing = [t for t in ("llama-bench", "llama-server") if find_llama_tool(t) is None]
    return f"{', '.join(missing)} not found (see lab doctor)" if missing else ""


@pytest.mark.engine
@pytest.mark.skipif(bool(_llama_ready()), reason=_llama_ready() or "ready")
def test_llama_bench_and_a_bare_server_request_on_the_real_engine(tmp_path: Path) -> None:
    text = (
        "[run]\nmax_tokens = 24\nrounds = 1\nwarmup = 1\nwarmup_tokens = 8\nthreads = 1\nn_ctx = 256\n"
        "probe = false\nreference = true\n"
        '[[prompts]]\nname = "code"\ntext = "Write a Python class LRUCache."\n'
        '[[arms]]\nname = "base"\nbackend = "llamacpp"\nmodel = "tiny:llama"\noptions = { n_batch = 256 }\n'
        '[[arms]]\nname = "server-base"\nbackend = "llamacpp-server"\nmodel = "tiny:llama"\n'
    )
    registry = load_registry()
    profile = parse_profile(text, str(tmp_path / "p.toml"), registry)
    store = RunStore(profile, tmp_path / "runs")
    rows = Runner(profile, registry, store, [ReportWriter()]).run()
    assert all(r["status"] == "ok" for r in rows), [(r["arm"], r["detail"][:300]) for r in rows]
    refs = load_run(store.path)["machine"]["references"]
    bench, bare = refs["base"], refs["server-base"]
    assert "error" not in bench and "error" not in bare, (bench, bare)
    # llama-bench with the arm's settings: its tokens, threads, no offload, its batch sizes, the prompt's depth
    argv = bench["command"].split()
    assert Path(argv[0]).name == "llama-bench"
    depth = next(r["prompt_tokens"] for r in rows if r["arm"] == "base")
    for flag, value in (("-n", "24"), ("-t", "1"), ("-ngl", "0"), ("-b", "256"), ("-ub", "256"), ("-fa", "auto"),
                        ("--repack", "1"), ("-d", str(depth)), ("-p", "0")):
        assert argv[argv.index(flag) + 1] == value, (flag, bench["command"])
    assert bench["tok_per_s"] > 0 and bench["counts"] == "decodes" and bench["build"]
    # the bare request: n_predict the arm's tokens, the server's own timings
    assert bare["command"].startswith("POST http://127.0.0.1:") and '"n_predict": 24' in bare["command"]
    assert bare["n_tokens"] == 24 and bare["tok_per_s"] > 0 and bare["counts"] == "tokens"
    assert len(bare["samples_tok_per_s"]) == 3
    md = (store.path / "report.md").read_text()
    assert "of llama-bench tg 24 (" in md and "of bare /completion of 24 tokens (" in md
