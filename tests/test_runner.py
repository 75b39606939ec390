"""Runner behaviour with a scripted backend: failures are results, the other
arms go on, everything measured is already on disk, and the run is one
stream of events that the store and every other listener hear in one order,
whatever thread emits."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from lab.api import Backend, EngineCrashed, EngineOOM, Generation, GenerationRequest
from lab.base.events import (
    ArmReported,
    Cell,
    Emit,
    Event,
    Finished,
    Held,
    Logged,
    MemorySample,
    RunFinished,
    RunStarted,
    Status,
    StatusChanged,
    StepEvent,
    TokenEvent,
)
from lab.base.row import ResultRow
from lab.hookspecs import hookimpl
from lab.profile.load import parse_profile
from lab.registry import load_registry
from lab.render.report import ReportWriter
from lab.runner import RunControl, Runner
from lab.store import RunStore, load_run, load_steps


class ScriptedBackend(Backend):
    """Emits a fixed token stream; speculative arms land 3 tokens per step.
    ``options.fail`` picks a failure: load, oom, crash, error (at round 1 of
    the second prompt)."""

    name = "scripted"
    stack = "scripted"
    from lab.api import Option

    options = (Option("fail", str, "", "failure to inject", choices=("", "load", "oom", "crash", "error", "hang")),
               Option("spec", bool, False, "draft with a built-in scripted drafter"),
               Option("pausable", bool, False, "hold between steps; gen_s by the wall clock"))

    def pauses_between_steps(self) -> bool:
        return bool(self.arm.options.get("pausable"))

    @classmethod
    def busy_cores(cls, arm_options, threads) -> int:
        return 0  # scripted timings: a busy machine cannot change them (lab.telemetry.contention)

    @classmethod
    def is_speculative(cls, arm_options, drafter) -> bool:
        return bool(arm_options.get("spec"))

    def load(self, emit: Emit) -> None:
        if self.arm.options.get("fail") == "load":
            raise EngineOOM("failed to allocate buffer", log_excerpt="ggml: out of memory")

    def generate(self, request: GenerationRequest, emit: Emit, cancelled: Callable[[], bool]) -> Generation:
        fail = self.arm.options.get("fail")
        if request.cell.prompt == "second" and request.cell.round == 1:
            if fail == "oom":
                raise EngineOOM("Compute error", log_excerpt="ggml_metal: out of memory")
            if fail == "crash":
                raise EngineCrashed("server exited with -9")
            if fail == "error":
                raise RuntimeError("bug in backend")
        ids: list[int] = []
        i = 0
        t0 = time.perf_counter()
        while len(ids) < request.max_tokens:
            if cancelled():
                from lab.api import Cancelled

                raise Cancelled()
            if fail == "hang":
                threading.Event().wait(0.01)
            if self.arm.options.get("spec"):
                n = min(3, request.max_tokens - len(ids))
                emit(TokenEvent(request.cell, "ab"[: n - 1], tuple(range(i, i + n - 1)), True))
                emit(TokenEvent(request.cell, "c", (i + n - 1,), False))
                emit(StepEvent(request.cell, i, drafted=4, accepted=n - 1, landed=n, draft_s=0.001, verify_s=0.002, step_s=0.003))
                ids.extend(range(i, i + n))
                i += n
            else:
                emit(TokenEvent(request.cell, "x", (i,), False))
                ids.append(i)
                i += 1
        text = "".join(chr(97 + t % 26) for t in ids)
        gen_s = 0.1 if not self.arm.options.get("spec") else 0.05
        if self.arm.options.get("pausable"):
            gen_s = time.perf_counter() - t0
        return Generation(text=text, ids=ids, prompt_tokens=5, prompt_s=0.01, gen_s=gen_s)

    def close(self) -> None:
        ScriptedBackend.closed.append(self.arm.name)

    closed: list[str] = []


class Plugin:
    @staticmethod
    @hookimpl
    def lab_register_backends(register: Callable[[type[Backend]], None]) -> None:
        register(ScriptedBackend)


def profile_text(arms: list[tuple[str, dict[str, Any]]], rounds: int = 2, warmup: int = 1) -> str:
    out = [f"[run]\nmax_tokens = 12\nrounds = {rounds}\nwarmup = {warmup}\n",
           '[[prompts]]\nname = "first"\ntext = "a"\n', '[[prompts]]\nname = "second"\ntext = "b"\n']
    for name, opts in arms:
        inline = ", ".join(f"{k} = {json.dumps(v)}" for k, v in opts.items())
        out.append(f'[[arms]]\nname = "{name}"\nbackend = "scripted"\nn_max = 3\noptions = {{ {inline} }}\n')
    return "\n".join(out)


def make_runner(tmp_path: Path, text: str, listeners: list[Callable[[Event], None]] = (), control: RunControl | None = None):
    registry = load_registry(extra_plugins=[Plugin])
    profile = parse_profile(text, "scripted.toml", registry)
    store = RunStore(profile, tmp_path)
    return Runner(profile, registry, store, list(listeners), control), store


@pytest.mark.slow
def test_failures_are_results_and_the_other_arms_go_on(tmp_path: Path) -> None:
    ScriptedBackend.closed.clear()
    text = profile_text([
        ("base", {}), ("oom", {"spec": True, "fail": "oom"}), ("crash", {"spec": True, "fail": "crash"}),
        ("bug", {"spec": True, "fail": "error"}), ("noload", {"spec": True, "fail": "load"}), ("fine", {"spec": True}),
    ])
    runner, store = make_runner(tmp_path, text, [ReportWriter()])
    results = runner.run()
    by = {(r["arm"], r["prompt"], r["round"]): r for r in results}
    assert len(results) == 6 * 2 * 2
    assert by[("oom", "second", 1)]["status"] == "oom"
    assert "out of memory" in by[("oom", "second", 1)]["detail"]
    assert by[("oom", "second", 2)]["status"] == "ok"  # the engine survived an OOM
    assert by[("crash", "second", 1)]["status"] == "crashed"
    assert by[("crash", "second", 2)]["status"] == "crashed"  # nothing runs on a dead engine
    assert by[("crash", "first", 1)]["status"] == "ok"
    assert by[("bug", "second", 1)]["status"] == "error" and "bug in backend" in by[("bug", "second", 1)]["detail"]
    assert all(by[("noload", p, r)]["status"] == "oom" for p in ("first", "second") for r in (1, 2))
    assert all(by[("fine", p, r)]["status"] == "ok" for p in ("first", "second") for r in (1, 2))
    assert by[("oom", "second", 1)]["verdict"].startswith("failed: oom")
    # Every backend that was created was closed, failed ones included.
    assert sorted(ScriptedBackend.closed) == sorted(["base", "oom", "crash", "bug", "noload", "fine"])
    # On disk: all rows, and the steps of every arm that ran.
    saved = load_run(store.path)
    assert len(saved["results"]) == len(results)
    steps = load_steps(store.path)
    assert {s["arm"] for s in steps} == {"oom", "crash", "bug", "fine"}
    assert not [s for s in steps if s["round"] == 0]  # warmup not recorded
    report = (store.path / "report.md").read_text()
    for arm, status in (("oom", "oom"), ("crash", "crashed"), ("bug", "error"), ("noload", "oom")):
        assert any(arm in line and status in line for line in report.splitlines()), (arm, status)


def test_metrics_follow_from_steps(tmp_path: Path) -> None:
    runner, _ = make_runner(tmp_path, profile_text([("base", {}), ("spec", {"spec": True})], rounds=1, warmup=0))
    results = runner.run()
    spec = next(r for r in results if r["arm"] == "spec" and r["prompt"] == "first")
    assert spec["steps"] == 4 and spec["drafted"] == 16 and spec["accepted"] == 8
    assert spec["acceptance_rate"] == pytest.approx(0.5)
    assert spec["mean_accepted_len"] == pytest.approx(3.0)
    assert spec["speedup"] == pytest.approx(2.0)  # 12/0.05 vs 12/0.1
    assert spec["step_cost_tokens"] == pytest.approx(0.003 * 120)
    assert spec["max_yield"] == 4
    assert spec["identical_to_baseline"] is True
    assert spec["verdict"].startswith("pays")


def test_results_are_on_disk_while_the_run_goes(tmp_path: Path) -> None:
    seen: list[int] = []
    store_box: list[RunStore] = []

    def listen(event: Event) -> None:
        if isinstance(event, Finished) and store_box:
            seen.append(len(load_run(store_box[0].path)["results"]))

    runner, store = make_runner(tmp_path, profile_text([("base", {}), ("spec", {"spec": True})]), [listen])
    store_box.append(store)
    runner.run()
    assert seen == list(range(1, 9))


def test_cancel_marks_the_rest_cancelled(tmp_path: Path) -> None:
    control = RunControl()

    def listen(event: Event) -> None:
        # cells run paired: the base's first cell, then the spec's beside it
        if isinstance(event, Finished) and event.result["arm"] == "base":
            control.cancel()

    text = profile_text([("base", {}), ("spec", {"spec": True, "fail": "hang"})])
    runner, store = make_runner(tmp_path, text, [listen], control)
    results = runner.run()
    statuses = {(r["arm"], r["prompt"], r["round"]): r["status"] for r in results}
    assert len(results) == 8
    assert [s for k, s in statuses.items() if k[0] == "spec"] == ["cancelled"] * 4
    assert sorted(s for k, s in statuses.items() if k[0] == "base") == ["cancelled"] * 3 + ["ok"]
    assert load_run(store.path)["cancelled"] is True


def test_rows_record_which_characters_came_from_drafts(tmp_path: Path) -> None:
    tokens: list[TokenEvent] = []

    def listen(event: Event) -> None:
        if isinstance(event, TokenEvent) and event.cell.arm == "spec" and event.cell.round == 1:
            tokens.append(event)

    text = profile_text([("base", {}), ("spec", {"spec": True})])
    runner, store = make_runner(tmp_path, text, [listen], RunControl())
    runner.run()
    rows = {(r["arm"], r["prompt"], r["round"]): r for r in load_run(store.path)["results"]}
    row = rows[("spec", tokens[0].cell.prompt, 1)]
    origin = row["text_origin"]
    assert sum(n for n, _ in origin) == len(row["text"])
    assert all(a[1] != b[1] for a, b in zip(origin, origin[1:]))  # runs alternate
    drafted = "".join(t.text for t in tokens if t.from_draft and t.cell.prompt == row["prompt"])
    assert sum(n for n, d in origin if d) == len(drafted) > 0
    assert rows[("base", row["prompt"], 1)]["text_origin"] is None  # a baseline drafts nothing


def _pause_on_third_token(control: RunControl, arm: str, events: list[Event], hold_s: float) -> Callable[[Event], None]:
    """A listener that pauses the run at the third token of ``arm``'s first
    measured cell and resumes it ``hold_s`` later from another thread."""
    seen = [0]

    def listen(event: Event) -> None:
        events.append(event)
        if isinstance(event, TokenEvent) and event.cell.arm == arm and event.cell.round == 1 \
                and event.cell.prompt == "first":
            seen[0] += 1
            if seen[0] == 3:
                control.pause()
                threading.Timer(hold_s, control.resume).start()

    return listen


def test_a_pause_holds_between_steps_and_is_taken_out_of_the_cell(tmp_path: Path) -> None:
    control = RunControl()
    events: list[Event] = []
    text = profile_text([("base", {"pausable": True}), ("spec", {"spec": True, "pausable": True})], warmup=0)
    runner, _ = make_runner(tmp_path, text, [_pause_on_third_token(control, "spec", events, 0.4)], control)
    results = runner.run()
    row = next(r for r in results if (r["arm"], r["prompt"], r["round"]) == ("spec", "first", 1))
    held = [e for e in events if isinstance(e, Held)]
    assert [e.seconds is None for e in held] == [True, False]
    assert all(e.in_cell and e.cell == Cell("spec", "first", 1) for e in held)
    assert held[1].seconds is not None and held[1].seconds >= 0.35
    assert row["engine_report"]["paused_s"] == held[1].seconds
    # the cell's clock lost the hold: its generation took milliseconds
    assert row["gen_s"] < 0.2 < held[1].seconds
    # no token landed while held
    at = events.index(held[0])
    back = events.index(held[1])
    assert not any(isinstance(e, TokenEvent) for e in events[at:back])
    assert {r["status"] for r in results} == {"ok"}


def test_a_backend_that_cannot_stop_between_steps_is_held_before_the_next_cell(tmp_path: Path) -> None:
    control = RunControl()
    events: list[Event] = []
    text = profile_text([("base", {}), ("spec", {"spec": True})], warmup=0)
    runner, _ = make_runner(tmp_path, text, [_pause_on_third_token(control, "spec", events, 0.3)], control)
    results = runner.run()
    held = [e for e in events if isinstance(e, Held)]
    assert held and not any(e.in_cell for e in held)
    # the cell after the one it paused in: paired, the base's next
    assert held[0].cell == Cell("base", "first", 2)
    row = next(r for r in results if (r["arm"], r["prompt"], r["round"]) == ("spec", "first", 1))
    assert "paused_s" not in row["engine_report"]


def test_a_cancelled_pending_arm_is_never_loaded(tmp_path: Path) -> None:
    control = RunControl()
    events: list[Event] = []

    def listen(event: Event) -> None:
        events.append(event)
        if isinstance(event, StatusChanged) and event.cell.arm == "base" and event.status == Status.LOADING:
            control.cancel_arm("skipped")

    text = profile_text([("base", {}), ("skipped", {"spec": True}), ("after", {"spec": True})])
    runner, store = make_runner(tmp_path, text, [listen], control)
    results = runner.run()
    assert {r["status"] for r in results if r["arm"] == "skipped"} == {"cancelled"}
    assert {r["status"] for r in results if r["arm"] == "after"} == {"ok"}
    assert not [e for e in events if isinstance(e, StatusChanged) and e.cell.arm == "skipped"
                and e.status == Status.LOADING]
    assert {r["arm"] for r in load_run(store.path)["results"] if r["status"] == "cancelled"} == {"skipped"}


def test_skip_arm_goes_to_the_next(tmp_path: Path) -> None:
    control = RunControl()
    events: list[Event] = []

    def listen(event: Event) -> None:
        events.append(event)
        if isinstance(event, TokenEvent) and event.cell.arm == "slow" and event.cell.round == 1:
            control.skip_arm()

    text = profile_text([("base", {}), ("slow", {"spec": True, "fail": "hang"}), ("after", {"spec": True})])
    runner, _ = make_runner(tmp_path, text, [listen], control)
    results = runner.run()
    # skipping moves on: the arm's cells are skipped, not cancelled or failed
    assert {r["status"] for r in results if r["arm"] == "slow"} == {"skipped"}
    assert {r["verdict"] for r in results if r["arm"] == "slow"} == {"skipped: not measured"}
    assert {r["status"] for r in results if r["arm"] == "after"} == {"ok"}
    assert any(isinstance(e, StatusChanged) and e.cell.arm == "after" for e in events)


def test_listeners_hear_every_event_in_the_order_they_subscribed_the_store_first(tmp_path: Path) -> None:
    heard: list[tuple[str, Any]] = []
    store_box: list[RunStore] = []
    behind: list[str] = []

    def first(event: Any) -> None:
        heard.append(("first", event))
        # the store heard it already: what it saves is on disk now
        if isinstance(event, Finished):
            saved = load_run(store_box[0].path)["results"]
            if saved[-1] != event.result.to_json():
                behind.append(f"results.json behind at {event.cell}")
        elif isinstance(event, StepEvent) and not event.cell.is_warmup:
            if load_steps(store_box[0].path)[-1]["index"] != event.index:
                behind.append(f"steps.jsonl behind at {event.cell} step {event.index}")

    def second(event: Any) -> None:
        heard.append(("second", event))

    runner, store = make_runner(tmp_path, profile_text([("base", {}), ("spec", {"spec": True})]), [first, second])
    store_box.append(store)
    rows = runner.run()
    assert not behind
    names = [n for n, _ in heard]
    assert names == ["first", "second"] * (len(heard) // 2)
    assert all(a[1] is b[1] for a, b in zip(heard[::2], heard[1::2]))
    events = [e for n, e in heard if n == "first"]
    assert isinstance(events[0], RunStarted) and isinstance(events[-1], RunFinished)
    finished = [e.result for e in events if isinstance(e, Finished)]
    # the rows the listeners heard are the runner's own, in its order
    assert finished == rows == list(runner.rows())
    assert all(isinstance(r, ResultRow) for r in rows)
    assert [e.arm for e in events if isinstance(e, ArmReported)] == ["base", "spec"]


def test_the_store_saves_what_it_hears_and_nothing_else(tmp_path: Path) -> None:
    """Replaying a run's events into a fresh store writes the same run."""
    events: list[Any] = []
    runner, store = make_runner(tmp_path / "a", profile_text([("base", {}), ("spec", {"spec": True})]),
                                [events.append])
    runner.run()
    runner.emit(Logged("a note for lab.log"))
    replay = RunStore(runner.profile, tmp_path / "b")
    for event in events:
        replay(event)
    a, b = load_run(store.path), load_run(replay.path)
    assert a["results"] == b["results"] and len(a["results"]) == 8
    assert a["arm_reports"] == b["arm_reports"] and set(a["arm_reports"]) == {"base", "spec"}
    assert a["cancelled"] is b["cancelled"] is False and b["finished"]
    assert load_steps(store.path) == load_steps(replay.path) != []
    assert (replay.path / "lab.log").read_text() == (store.path / "lab.log").read_text() == "a note for lab.log\n"
    # the report is not the store's: only a subscribed ReportWriter writes it
    assert not (store.path / "report.md").exists()


def test_the_runner_imports_neither_the_store_nor_the_report() -> None:
    import subprocess
    import sys

    code = "import sys, lab.runner; print(sorted(m for m in ('lab.store', 'lab.render.report') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parent.parent,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_emit_is_safe_from_many_threads(tmp_path: Path) -> None:
    """Engine threads, the memory sampler and the runner's worker emit at
    once: every event reaches every listener whole, one at a time, and all
    listeners hear one order."""
    runner, _ = make_runner(tmp_path, profile_text([("base", {})]))
    trace: list[tuple[str, str, int]] = []
    second: list[MemorySample] = []

    def slow(event: Any) -> None:
        trace.append(("in", event.arm, event.rss_bytes))
        time.sleep(0)  # give the other threads every chance to cut in
        trace.append(("out", event.arm, event.rss_bytes))

    runner.listeners = [slow, second.append]
    n_threads, per_thread = 8, 300
    start = threading.Barrier(n_threads)

    def emitter(k: int) -> None:
        start.wait()
        for i in range(per_thread):
            runner.emit(MemorySample(f"t{k}", i))

    threads = [threading.Thread(target=emitter, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(trace) == 2 * n_threads * per_thread
    pairs = list(zip(trace[::2], trace[1::2]))
    assert all(a[0] == "in" and b[0] == "out" and a[1:] == b[1:] for a, b in pairs), "two events interleaved"
    for k in range(n_threads):
        assert [i for _, arm, i in trace[::2] if arm == f"t{k}"] == list(range(per_thread))
    assert [(e.arm, e.rss_bytes) for e in second] == [a[1:] for a, _ in pairs]


@pytest.mark.slow
def test_a_warmup_cell_generates_warmup_tokens_and_recorded_cells_max_tokens(tmp_path: Path) -> None:
    from lab.base.events import TokenEvent
    from tests.fakes import fake_registry, profile_toml

    def ran(extra: str) -> tuple[int, int]:
        tokens: dict[bool, int] = {True: 0, False: 0}

        def listen(event: Event) -> None:
            if isinstance(event, TokenEvent):
                tokens[event.cell.is_warmup] += len(event.ids)

        text = profile_toml('[[arms]]\nname = "base"\nbackend = "fake"\n', max_tokens=24, warmup=1)
        text = text.replace("[run]\n", f"[run]\n{extra}", 1)
        registry = fake_registry()
        profile = parse_profile(text, str(tmp_path / "p.toml"), registry)
        rows = Runner(profile, registry, listeners=[listen]).run()
        assert [r["n_tokens"] for r in rows] == [24]
        return tokens[True], tokens[False]

    assert ran("warmup_tokens = 5\n") == (5, 24)
    assert ran("") == (24, 24)  # the default, 64, is more than max_tokens here
    assert ran("warmup_tokens = 0\n") == (24, 24)  # 0: as many as a measured cell


@pytest.mark.slow
def test_each_run_knows_the_runs_its_process_started_before_and_a_gpu_report_warns(tmp_path: Path) -> None:
    """An earlier lab run in the same process can leave a GPU slower for the
    next run's baseline: results.json records how many ran before, and the
    report of a run that sampled a GPU says so; a first run or a CPU run
    carries no warning."""
    from lab.render.conditions import machine_lines
    from lab.render.report import load_for_report, render_markdown

    heard: list[RunStarted] = []

    def hear(event: Event) -> None:
        if isinstance(event, RunStarted):
            heard.append(event)

    text = profile_text([("base", {})])
    first, first_store = make_runner(tmp_path / "a", text, [hear])
    first.run()
    second, second_store = make_runner(tmp_path / "b", text, [hear])
    rows = second.run()
    assert [e.runs_before for e in heard] == [heard[0].runs_before, heard[0].runs_before + 1]
    before = load_run(second_store.path)["machine"]["lab_runs_before"]
    assert before == heard[1].runs_before == load_run(first_store.path)["machine"]["lab_runs_before"] + 1
    on_gpu = [{**r, "gpu_name": "NVIDIA H200"} for r in rows]
    # the report reads the count from results.json
    data = load_for_report(second_store.path)
    assert f"its process ran {before} lab run" not in render_markdown(data)  # the scripted backend has no GPU
    warned = render_markdown({**data, "results": [{**r, "gpu_name": "NVIDIA H200"} for r in data["results"]]})
    assert f"its process ran {before} lab run" in warned and "`lab run`" in warned
    assert "its process ran" not in "\n".join(machine_lines(rows, {"lab_runs_before": before}))  # no GPU
    assert "its process ran" not in "\n".join(machine_lines(on_gpu, {"lab_runs_before": 0}))
    assert "its process ran" not in "\n".join(machine_lines(on_gpu, {}))  # saved before the lab kept the count
