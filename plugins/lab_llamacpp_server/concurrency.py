"""Requests read from the stream alone, one or several at a time:
``concurrency = N`` sends N streams of the cell's prompt at once, the first
being the cell and the others load, each read to its end and timed; bounded
by :data:`lab.kit.server.concurrency.MAX_CONCURRENCY` and a deadline."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from lab.api import Cancelled, EngineFailure, Generation, GenerationRequest
from lab.base.events import Emit, StepEvent, TokenEvent, now
from lab.kit.server.client import ServerClient
from lab.kit.server.concurrency import StreamRecord, end_side_streams, stream_summary
from lab.kit.server.sse import parse_sse_lines
from lab_llamacpp_server import crosscheck
from lab_llamacpp_server.client import LlamaServerClient
from lab_llamacpp_server.metrics import counter_delta, per_position, without_positions
from lab_llamacpp_server.stream import Chunk, StepTracker, consume, generation
from lab_llamacpp_server.stream_steps import StreamSteps


@dataclass
class TrackedRecord(StreamRecord):
    """A stream as it arrived, with the steps its counters showed."""

    tracker: StepTracker | None = None


def _side_stream(lead: ServerClient, body: dict[str, Any], record: TrackedRecord,
                 start: threading.Barrier, stop: threading.Event, timeout_s: float) -> None:
    """One load stream on a client of its own, within the lead's idle
    limits, read to its end (or until ``stop``)."""
    import httpx

    client = ServerClient(lead.base_url, lead.headers)
    client.first_event_s, client.idle_s = lead.first_event_s, lead.idle_s
    tracker = StepTracker(0.0)
    record.tracker = tracker
    try:
        start.wait(timeout=timeout_s)
        record.t_sent = now()
        tracker = record.tracker = StepTracker(record.t_sent)

        def landed(chunk: Chunk, ids: list[int], from_draft: bool) -> None:
            record.arrivals.append((chunk.t, chunk.n_tokens))

        with client.completion(body, deadline=record.t_sent + timeout_s, stop=stop.is_set) as lines:
            streamed = consume(parse_sse_lines(lines), record.t_sent, tracker.feed, landed, stop.is_set,
                               limit=_asked(body))
        record.final = streamed.final
    except Cancelled:
        record.error = "stopped"
    except threading.BrokenBarrierError:
        record.error = "did not start"
    except (httpx.HTTPError, RuntimeError) as exc:
        record.error = f"{type(exc).__name__}: {exc}"
    finally:
        client.close()


def _check_all(records: Sequence[TrackedRecord], delta: Mapping[str, float]) -> dict[str, bool]:
    """Every stream's steps against the server's counters, summed: with N
    requests in flight only the sum is the server's."""
    steps = [s for r in records if r.tracker is not None for s in r.tracker.steps]
    drafted = sum(s.drafted for s in steps)
    accepted = sum(s.accepted for s in steps)
    checks = {
        "streams_vs_timings": all(
            r.tracker is not None and (sum(s.drafted for s in r.tracker.steps), sum(s.accepted for s in r.tracker.steps))
            == r.counts() for r in records
        ),
    }
    if delta:
        checks["streams_vs_metrics"] = (
            drafted == int(delta.get("spec_decode_num_draft_tokens_total", -1))
            and accepted == int(delta.get("spec_decode_num_accepted_tokens_total", -1))
            and len(steps) == int(delta.get("spec_decode_num_drafts_total", -1))
        )
        pos = per_position(dict(delta))
        if pos:
            checks["per_position_vs_metrics"] = [sum(1 for s in steps if s.accepted > i) for i in range(len(pos))] == pos
    return checks


def _too_long(n: int, timeout_s: float) -> str:
    return f"the {n} stream(s) of this cell took longer than concurrency_timeout_s = {timeout_s:.0f} s"


def generate_streamed(client: LlamaServerClient, body: dict[str, Any], request: GenerationRequest, emit: Emit,
                      cancelled: Callable[[], bool], *, speculative: bool, concurrency: int,
                      timeout_s: float, exclusive_metrics: bool) -> Generation:
    """One cell read from the stream, ``concurrency - 1`` others beside it;
    ``exclusive_metrics``: no other client moves the server's counters."""
    import httpx

    n = max(1, concurrency)
    start = threading.Barrier(n)
    stop = threading.Event()
    side = [TrackedRecord() for _ in range(n - 1)]
    threads = [
        threading.Thread(target=_side_stream, args=(client, body, rec, start, stop, timeout_s),
                         name=f"load-stream-{i + 1}", daemon=True)
        for i, rec in enumerate(side)
    ]
    before = client.metrics()
    for t in threads:
        t.start()
    lead = TrackedRecord()
    deadline = now() + timeout_s
    try:
        if n > 1:
            start.wait(timeout=timeout_s)
        lead.t_sent = now()
        tracker = StepTracker(lead.t_sent)
        lead.tracker = tracker
        live = StreamSteps(request.cell, emit, tracker)

        def landed(chunk: Chunk, ids: list[int], from_draft: bool) -> None:
            lead.arrivals.append((chunk.t, chunk.n_tokens))
            emit(TokenEvent(request.cell, chunk.text, tuple(ids), from_draft=from_draft, t=chunk.t))
            live.poll()

        def stop_asked() -> bool:
            return cancelled() or now() > deadline

        try:
            # the deadline is checked on every piece the server sends, comments included
            with client.completion(body, deadline=deadline, stop=stop_asked) as lines:
                streamed = consume(parse_sse_lines(lines), lead.t_sent, live.feed, landed, stop_asked,
                                   limit=request.max_tokens)
        except Cancelled:
            live.abandon()
            if not cancelled():
                raise EngineFailure(_too_long(n, timeout_s)) from None
            raise
        except BaseException:
            live.abandon()
            raise
        lead.final = streamed.final
        steps: list[StepEvent] = live.finish()
        for t in threads:
            t.join(timeout=max(deadline - now(), 0.0))
        if any(t.is_alive() for t in threads):
            raise EngineFailure(_too_long(n, timeout_s))
    except threading.BrokenBarrierError as exc:
        raise EngineFailure(f"the {n} streams of this cell did not all start") from exc
    except httpx.HTTPError as exc:
        raise EngineFailure(f"{type(exc).__name__}: {exc}") from exc
    finally:
        end_side_streams(stop, start, threads)
    after = client.metrics()

    gen = generation(streamed)
    records = [lead, *side]
    # one stream: its steps against the counters as a launched server's are;
    # several: only the sum over all streams is the server's (below)
    crosscheck.fill_report(
        gen.engine_report, n_tokens=len(gen.ids), gen_s=gen.gen_s, speculative=speculative,
        steps=steps, tracker=tracker, logged_steps=0,
        metrics_before=before if n == 1 else {}, metrics_after=after if n == 1 else {},
        acc_per_pos=None, summary=None, draft_ms=None, draft_calls=None,
    )
    report = gen.engine_report
    report["steps_source"] = "stream"
    if not exclusive_metrics:
        report["metrics_note"] = "an attached server's counters also count any other client's requests"
    if n > 1:
        delta = counter_delta(before, after) if before and after else {}
        report["metrics_delta"] = without_positions(delta)
        report["metrics_accepted_per_pos"] = per_position(delta)
        checks = dict(report.get("checks") or {})
        if speculative:
            checks.update(_check_all(records, delta))
        report["checks"] = checks
        report["counts_match_server"] = all(checks.values()) if checks else None
    report["concurrency"] = stream_summary(records)
    return gen


def _asked(body: dict[str, Any]) -> int | None:
    """The tokens a /completion body asks for (its n_predict)."""
    n = body.get("n_predict")
    return n if isinstance(n, int) and n >= 0 else None
