"""The bridge between the runner thread and the UI: batching, ordering,
replaceable metrics, pause gate, cancelling pending arms."""

from __future__ import annotations

import threading
import time

from lab.base.events import (
    Cell,
    Finished,
    Held,
    MemorySample,
    RunFinished,
    RunStarted,
    Status,
    StatusChanged,
    StepEvent,
    TokenEvent,
    arm_cell,
)
from lab.base.row import ResultRow
from lab.runner import RunControl
from lab.tui.bridge import EventBridge
from lab.tui.cadence import FULL_METRICS_HZ, Cadence
from lab.tui.messages import (
    ArmMetrics,
    ArmMetricsUpdated,
    ArmStatusChanged,
    CellFinished,
    PauseChanged,
    RunEnded,
    TokensLanded,
)


def _row(cell: Cell) -> ResultRow:
    return ResultRow(arm=cell.arm, backend="fake", drafter=None, prompt=cell.prompt, round=cell.round, status=Status.OK)


def _bridge(hz: float = 30.0) -> tuple[EventBridge, list[object]]:
    posted: list[object] = []
    lock = threading.Lock()

    def post(message: object) -> None:
        with lock:
            posted.append(message)

    return EventBridge(post, RunControl(), Cadence(hz, FULL_METRICS_HZ)), posted


def test_tokens_are_batched_and_arrive_whole_before_the_cell_finishes() -> None:
    bridge, posted = _bridge()
    cell = Cell("spec", "prose", 1)
    bridge(RunStarted("p", "/tmp/x", ("spec",), ("prose",), 1))
    bridge(StatusChanged(cell, Status.RUNNING))
    expected = []
    for i in range(2000):
        from_draft = i % 3 != 0
        bridge(TokenEvent(cell, f"t{i} ", (i,), from_draft))
        expected.append((f"t{i} ", from_draft))
        if i % 4 == 3:
            bridge(StepEvent(cell, i // 4, drafted=4, accepted=2, landed=3, draft_s=0.001, verify_s=0.002, step_s=0.003))
    bridge(Finished(cell, _row(cell)))
    bridge(RunFinished("/tmp/x"))

    batches = [m for m in posted if isinstance(m, TokensLanded)]
    # 2000 tokens posted in far fewer messages than tokens
    assert 1 <= len(batches) < 200
    text = "".join(t for b in batches for t, _ in b.segments)
    assert text == "".join(t for t, _ in expected)
    drafted_text = "".join(t for b in batches for t, d in b.segments if d)
    assert drafted_text == "".join(t for t, d in expected if d)
    assert sum(len(b.steps) for b in batches) == 500
    finished_at = next(i for i, m in enumerate(posted) if isinstance(m, CellFinished))
    last_batch = max(i for i, m in enumerate(posted) if isinstance(m, TokensLanded))
    assert last_batch < finished_at
    assert isinstance(posted[-1], RunEnded)


def test_live_metrics_come_from_event_timestamps() -> None:
    bridge, posted = _bridge()
    cell = Cell("spec", "prose", 1)
    bridge(StatusChanged(cell, Status.RUNNING))
    bridge(TokenEvent(cell, "a", (1,), False, t=100.0))
    for i in range(10):
        bridge(TokenEvent(cell, "b", (2,), True, t=100.0 + (i + 1) * 0.1))
    bridge(StepEvent(cell, 1, drafted=4, accepted=3, landed=4, draft_s=0.004, verify_s=0.006, step_s=0.01))
    bridge(MemorySample("spec", 300 * 2**20))
    bridge(MemorySample("spec", 200 * 2**20))
    bridge.flush()
    metrics = [m.metrics for m in posted if isinstance(m, ArmMetricsUpdated)][-1]
    assert metrics.tokens == 11
    assert abs((metrics.tok_per_s or 0) - 10 / 1.0) < 1e-9
    assert metrics.acceptance_rate == 0.75
    assert metrics.mean_accepted_len == 4.0
    assert metrics.last_draft_ms is not None and abs(metrics.last_draft_ms - 4.0) < 1e-9
    assert metrics.mem_bytes == 200 * 2**20 and metrics.peak_mem_bytes == 300 * 2**20


def test_figures_are_posted_less_often_than_text_and_the_last_ones_always_arrive() -> None:
    posted: list[object] = []
    bridge = EventBridge(posted.append, RunControl(), Cadence(200, 2))
    cell = Cell("spec", "prose", 1)
    bridge(RunStarted("p", "/tmp/x", ("spec",), ("prose",), 1))
    bridge(StatusChanged(cell, Status.RUNNING))
    start = time.monotonic()
    i = 0
    while time.monotonic() - start < 0.6:
        bridge(TokenEvent(cell, f"t{i} ", (i,), False, t=100.0 + i * 0.01))
        i += 1
        time.sleep(0.002)
    bridge(Finished(cell, _row(cell)))
    bridge(RunFinished("/tmp/x"))
    texts = [m for m in posted if isinstance(m, TokensLanded)]
    figures = [m.metrics for m in posted if isinstance(m, ArmMetricsUpdated)]
    # 0.6 s at 2 Hz: the flusher's figures plus the forced ones around status
    # changes and the end of the cell, while text went out far more often
    assert len(figures) <= 6 < len(texts)
    last_figures = max(j for j, m in enumerate(posted) if isinstance(m, ArmMetricsUpdated))
    finished_at = next(j for j, m in enumerate(posted) if isinstance(m, CellFinished))
    assert last_figures < finished_at and figures[-1].tokens == i


def test_metrics_messages_replace_each_other_per_arm() -> None:
    def snap(arm: str, n: int) -> ArmMetricsUpdated:
        return ArmMetricsUpdated(ArmMetrics(arm, "p", 1, n, None, 0, 0, 0, 0, None, None, None, None))

    assert snap("a", 1).can_replace(snap("a", 2))
    assert not snap("a", 1).can_replace(snap("b", 2))
    assert not snap("a", 1).can_replace(ArmStatusChanged(StatusChanged(arm_cell("a"), Status.OK)))


def test_pause_is_the_runners_and_its_holds_become_messages() -> None:
    bridge, posted = _bridge()
    cell = Cell("a", "p", 1)
    bridge.pause()
    assert bridge.control.paused and bridge.paused
    bridge(StatusChanged(cell, Status.RUNNING))
    bridge(TokenEvent(cell, "x", (1,), False, t=100.0))
    bridge(Held(cell, None, in_cell=True))
    assert [(m.paused, m.holding) for m in posted if isinstance(m, PauseChanged)][-1] == (True, True)
    bridge.resume()
    assert not bridge.control.paused
    bridge(Held(cell, 5.0, in_cell=True))
    bridge(TokenEvent(cell, "y", (2,), False, t=106.0))
    bridge.flush()
    assert [(m.paused, m.holding) for m in posted if isinstance(m, PauseChanged)][-1] == (False, False)
    # 1 token after the first in 6 s of which 5 were held: 1 tok/s, not 1/6
    metrics = [m.metrics for m in posted if isinstance(m, ArmMetricsUpdated)][-1]
    assert metrics.tok_per_s is not None and abs(metrics.tok_per_s - 1.0) < 1e-9


def test_cancel_ends_a_hold() -> None:
    bridge, _ = _bridge()
    bridge.pause()
    done = threading.Event()

    def runner_thread() -> None:
        bridge.control.hold()
        done.set()

    t = threading.Thread(target=runner_thread)
    t.start()
    time.sleep(0.15)
    assert not done.is_set(), "the hold ended while still paused"
    bridge.cancel()
    t.join(2)
    assert done.is_set() and bridge.control.cancelled


def test_cancelling_a_pending_arm_marks_it_for_the_runner_and_leaves_the_running_one() -> None:
    bridge, _ = _bridge()
    bridge(StatusChanged(arm_cell("first"), Status.LOADING))
    bridge.cancel_arm("second")
    assert not bridge.control.skip_requested
    assert bridge.control.arm_cancelled("second") and not bridge.control.arm_cancelled("first")
    bridge.cancel_arm("first")  # the running arm stops at its next step
    assert bridge.control.skip_requested
