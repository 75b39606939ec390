"""One contract, every backend: the same suite runs over each registered
backend (the scripted fake, llama.cpp in process, llama-server, MLX, MLX
DFlash, vLLM), each on the smallest real model it runs, through the real
runner.

What a backend owes the runner and every listener: the event order (the
arm loads, then each cell's tokens and steps, then its row), step indices
counted per cell from 0, step sums equal to the row's, token texts that
concatenate to the row's text, a cancel that leaves no engine process, and
a failure that becomes a status row instead of an exception."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import psutil
import pytest

from lab.base.events import Cell, Event, Finished, Status, StatusChanged, StepEvent, TokenEvent
from lab.profile.load import parse_profile
from lab.registry import Registry, load_registry
from lab.runner import RunControl, Runner
from tests.fakes import fake_plugin
from tests.needs import need_vllm

pytestmark = pytest.mark.engine


@dataclass(frozen=True)
class Case:
    """Arms for one backend: a baseline, a speculative arm that drafts
    every step, and the model key (TOML) of a broken model for the failure.
    ``{broken}`` in an arm is replaced by a file that is not a model."""

    baseline: str
    speculative: str
    broken: str
    # A prompt of the backend's own where its drafter drafts only on some
    # text (vLLM's n-gram lookup drafts where the output repeats the prompt).
    prompt: str | None = None


CASES: dict[str, Case] = {
    "fake": Case(
        baseline='backend = "fake"\noptions = { spawn_child = true, token_delay_s = 0.002 }',
        speculative='backend = "fake"\nn_max = 3\noptions = { speculative = true, accepted = [3, 1, 0] }',
        broken='backend = "fake"\noptions = { mode = "crash", fail_after = 2 }',
    ),
    "llamacpp": Case(
        baseline='backend = "llamacpp"\nmodel = "embedded:smollm2"',
        speculative='backend = "llamacpp"\nmodel = "embedded:smollm2"\ndrafter = "oracle"\nn_max = 3\n'
                    "drafter_options = { error_rate = 0.3 }",
        broken='backend = "llamacpp"\nmodel = "{broken}"',
    ),
    "llamacpp-server": Case(
        baseline='backend = "llamacpp-server"\nmodel = "tiny:llama"',
        speculative='backend = "llamacpp-server"\nmodel = "tiny:llama"\nn_max = 3\n'
                    'options = { spec_type = "draft-simple", draft_model = "tiny:llama" }',
        broken='backend = "llamacpp-server"\nmodel = "{broken}"',
    ),
    "mlx": Case(
        baseline='backend = "mlx"\nmodel = "tiny:qwen3"',
        speculative='backend = "mlx"\nmodel = "tiny:qwen3"\ndrafter = "oracle"\nn_max = 3\n'
                    "drafter_options = { error_rate = 0.3 }",
        broken='backend = "mlx"\nmodel = "{broken}"',
    ),
    "mlx-dflash": Case(
        baseline='backend = "mlx"\nmodel = "tiny:qwen3"',
        speculative='backend = "mlx-dflash"\nmodel = "tiny:qwen3"\nn_max = 3\noptions = { draft = "tiny:qwen3-dflash" }',
        broken='backend = "mlx-dflash"\nmodel = "tiny:qwen3"\noptions = { draft = "{broken}" }',
    ),
    "mlx-mtp": Case(
        baseline='backend = "mlx"\nmodel = "tiny:qwen3"',
        speculative='backend = "mlx-mtp"\nmodel = "tiny:qwen3"\nn_max = 2\noptions = { mtp = "tiny:qwen3-mtp" }',
        broken='backend = "mlx-mtp"\nmodel = "tiny:qwen3"\noptions = { mtp = "{broken}" }',
    ),
    # the engines a Mac user runs, each on its own loop (docs/mac-engines.md)
    "mlx-lm": Case(
        baseline='backend = "mlx-lm"\nmodel = "tiny:qwen3"',
        speculative='backend = "mlx-lm"\nmodel = "tiny:qwen3"\nn_max = 3\noptions = { draft_model = "tiny:qwen3-draft" }',
        broken='backend = "mlx-lm"\nmodel = "{broken}"',
    ),
    "zlab-dflash": Case(
        baseline='backend = "mlx"\nmodel = "tiny:qwen3"',
        speculative='backend = "zlab-dflash"\nmodel = "tiny:qwen3"\nn_max = 3\noptions = { draft = "tiny:qwen3-dflash" }',
        broken='backend = "zlab-dflash"\nmodel = "tiny:qwen3"\noptions = { draft = "{broken}" }',
    ),
    "dflash-mlx": Case(
        baseline='backend = "mlx"\nmodel = "tiny:qwen3"',
        speculative='backend = "dflash-mlx"\nmodel = "tiny:qwen3"\nn_max = 3\noptions = { draft = "tiny:qwen3-dflash" }',
        broken='backend = "dflash-mlx"\nmodel = "tiny:qwen3"\noptions = { draft = "{broken}" }',
    ),
    "vllm": Case(
        baseline='backend = "vllm"\nmodel = "embedded:smollm2"',
        speculative='backend = "vllm"\nmodel = "embedded:smollm2"\nn_max = 3\n'
                    'options = { spec_method = "ngram", prompt_lookup_min = 2, prompt_lookup_max = 3 }',
        broken='backend = "vllm"\nmodel = "{broken}"',
        prompt="Repeat this line three times: the quick brown fox jumps over the lazy dog.",
    ),
}


def _usable(backend: str) -> None:
    """Skip, with the reason, a case whose engine this machine lacks (vLLM
    is an extra: bash scripts/setup.sh all installs it, CI included)."""
    if backend == "vllm":
        need_vllm()
    if backend in ("mlx-lm", "zlab-dflash", "dflash-mlx"):
        missing = load_registry().backend(backend).missing_engine({})
        if missing is not None:
            pytest.skip(f"{missing.engine} is not usable here: {missing.why} ({missing.install})")

HEAD = """
[profile]
name = "contract"

[run]
max_tokens = {max_tokens}
rounds = 1
warmup = 0
n_ctx = 512
threads = 1
memory_interval_s = 0.05
probe = false

[[prompts]]
name = "p"
text = "{prompt}"
"""
PROMPT = "Write a short poem about the sea and the lighthouse keeper."


@pytest.fixture(scope="module")
def registry() -> Registry:
    load_registry()
    return load_registry(extra_plugins=[fake_plugin])


def test_every_registered_backend_is_covered(registry: Registry) -> None:
    # A backend whose speculative arm runs under another name is covered by
    # its siblings' suite (llamacpp-mtp, llamacpp-dflash share the server's).
    families = {"llamacpp-mtp": "llamacpp-server", "llamacpp-dflash": "llamacpp-server"}
    missing = {families.get(name, name) for name in registry.backends} - set(CASES)
    assert not missing, f"backends without a contract case: {sorted(missing)}"
    assert set(CASES) <= set(registry.backends), [e.error for e in registry.errors]


def _arm(name: str, body: str) -> str:
    return f'\n[[arms]]\nname = "{name}"\n{body}\n'


def _run(registry: Registry, tmp_path: Path, arms: str, max_tokens: int,
         control: RunControl | None = None, cancel_on_first_token: bool = False,
         prompt: str | None = None) -> list[Event]:
    events: list[Event] = []
    control = control or RunControl()

    def listen(event: Event) -> None:
        events.append(event)
        if cancel_on_first_token and isinstance(event, TokenEvent):
            control.cancel()

    path = tmp_path / "contract.toml"
    text = HEAD.format(max_tokens=max_tokens, prompt=prompt or PROMPT) + arms
    path.write_text(text)
    profile = parse_profile(text, str(path), registry)
    Runner(profile, registry, listeners=[listen], control=control).run()
    return events


def _rows(events: list[Event]) -> dict[Cell, Mapping[str, Any]]:
    return {e.cell: e.result for e in events if isinstance(e, Finished)}


@dataclass
class Ran:
    backend: str
    events: list[Event]


# vLLM's case runs one at a time with the other vLLM tests (tests/conftest.py)
@pytest.fixture(scope="module", params=[pytest.param(c, marks=pytest.mark.xdist_group("vllm")) if c == "vllm" else c
                                        for c in CASES])
def ran(request: pytest.FixtureRequest, registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> Ran:
    _usable(request.param)
    case = CASES[request.param]
    arms = _arm("base", case.baseline) + _arm("spec", case.speculative)
    return Ran(request.param, _run(registry, tmp_path_factory.mktemp(request.param), arms, max_tokens=16,
                                   prompt=case.prompt))


def _kind(event: Event) -> str:
    if isinstance(event, StatusChanged):
        if event.status == Status.LOADING:
            return "L"
        return "R" if event.status in (Status.RUNNING, Status.WARMUP) else "E"
    if isinstance(event, TokenEvent):
        return "T"
    if isinstance(event, StepEvent):
        return "S"
    if isinstance(event, Finished):
        return "F"
    return ""


def test_rows_are_ok(ran: Ran) -> None:
    rows = _rows(ran.events)
    assert {c.arm for c in rows} == {"base", "spec"}
    assert all(r["status"] == "ok" for r in rows.values()), [(c.arm, r["status"], r["detail"]) for c, r in rows.items()]


def test_event_order(ran: Ran) -> None:
    for arm in ("base", "spec"):
        kinds = "".join(_kind(e) for e in ran.events if getattr(e, "cell", None) is not None and e.cell.arm == arm)
        # Loading first, then per cell: running, tokens and steps, its row;
        # the arm's final status last.
        assert re.fullmatch(r"L+(R[TS]*T[TS]*F)+E?", kinds), f"{ran.backend} {arm}: {kinds}"


def test_step_indices_count_per_cell_from_zero(ran: Ran) -> None:
    for cell in _rows(ran.events):
        steps = [e for e in ran.events if isinstance(e, StepEvent) and e.cell == cell]
        assert [s.index for s in steps] == list(range(len(steps))), f"{ran.backend} {cell}"
        if cell.arm == "spec":
            assert steps, f"{ran.backend}: the speculative arm emitted no step"
        else:
            assert not steps, f"{ran.backend}: the baseline emitted steps"


def test_step_sums_equal_the_row(ran: Ran) -> None:
    for cell, row in _rows(ran.events).items():
        steps = [e for e in ran.events if isinstance(e, StepEvent) and e.cell == cell]
        if cell.arm == "base":
            assert not row["steps"] and not row["drafted"], f"{ran.backend}: {row['steps']}"
            continue
        assert row["steps"] == len(steps), ran.backend
        assert row["drafted"] == sum(s.drafted for s in steps), ran.backend
        assert row["accepted"] == sum(s.accepted for s in steps), ran.backend
        assert all(0 <= s.accepted <= s.drafted for s in steps), ran.backend


def test_token_text_concatenates_to_the_row_text(ran: Ran) -> None:
    for cell, row in _rows(ran.events).items():
        tokens = [e for e in ran.events if isinstance(e, TokenEvent) and e.cell == cell]
        assert "".join(t.text for t in tokens) == row["text"], f"{ran.backend} {cell.arm}"
        assert sum(len(t.ids) for t in tokens) == row["n_tokens"], f"{ran.backend} {cell.arm}"


def _children() -> set[int]:
    """This process's live descendants (each arm's own process among them)."""
    out = set()
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                out.add(proc.pid)
        except psutil.NoSuchProcess:
            continue
    return out


def _reap(before: set[int], timeout: float = 10.0) -> set[int]:
    """Processes started since ``before`` that outlive ``timeout``; killed
    (never left behind, even when the test fails) and returned."""
    deadline = time.monotonic() + timeout
    left = _children() - before
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = _children() - before
    for pid in left:
        try:
            psutil.Process(pid).kill()
        except psutil.NoSuchProcess:
            pass
    return left


@pytest.mark.parametrize("backend", list(CASES))
def test_cancel_leaves_no_engine_process(backend: str, registry: Registry, tmp_path: Path) -> None:
    _usable(backend)
    case = CASES[backend]
    before = _children()
    control = RunControl()
    events = _run(registry, tmp_path, _arm("base", case.baseline), max_tokens=400, control=control,
                  cancel_on_first_token=True)
    left = _reap(before)
    rows = _rows(events)
    assert [r["status"] for r in rows.values()] == ["cancelled"], [(r["status"], r["detail"]) for r in rows.values()]
    assert not left, f"{backend} left engine processes {sorted(left)} after a cancel"


@pytest.mark.parametrize("backend", list(CASES))
def test_failure_becomes_a_status_row(backend: str, registry: Registry, tmp_path: Path) -> None:
    _usable(backend)
    case = CASES[backend]
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"this is not a model\n" * 64)
    before = _children()
    arms = _arm("broken", case.broken.replace("{broken}", broken.name)) + _arm("base", case.baseline)
    events = _run(registry, tmp_path, arms, max_tokens=8)
    rows = {c.arm: r for c, r in _rows(events).items()}
    assert rows["broken"]["status"] in (Status.ERROR, Status.CRASHED, Status.OOM), rows["broken"]
    assert rows["broken"]["detail"], rows["broken"]
    # The run goes on: the next arm still runs.
    assert rows["base"]["status"] == Status.OK, rows["base"]["detail"]
    final = [e for e in events if isinstance(e, StatusChanged) and e.cell.arm == "broken"][-1]
    assert final.status == rows["broken"]["status"]
    assert not _reap(before)
