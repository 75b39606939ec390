"""A llama-server lane moves step by step: step events reach a listener while
the request still streams, counted per cell from 0, and they add up to the
server's own counters. Real llama-server on the embedded SmolLM2 drafting
for itself."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from lab_llamacpp_server.binary import ServerNotFound, server_info

pytestmark = pytest.mark.engine

try:
    server_info()
    _SKIP = ""
except ServerNotFound as exc:  # pragma: no cover - depends on the machine
    _SKIP = f"llama-server not found: {exc}"

needs_server = pytest.mark.skipif(bool(_SKIP), reason=_SKIP or "llama-server not found")

PROFILE = """
[run]
max_tokens = 64
n_ctx = 1024
threads = 1
chat_template = true
[[prompts]]
name = "p"
text = "Write a short poem about the sea and the lighthouse keeper."
[[arms]]
name = "self"
backend = "llamacpp-server"
model = "embedded:smollm2"
n_max = 4
options = { spec_type = "draft-simple", draft_model = "embedded:smollm2" }
"""


def _backend(tmp_path: Path) -> Any:
    import lab_llamacpp_server

    from lab.api import BackendContext
    from lab.profile.load import parse_profile
    from lab.registry import load_registry

    reg = load_registry()
    if "llamacpp-server" not in reg.backends:
        reg = load_registry([lab_llamacpp_server.plugin])
    profile = parse_profile(PROFILE, str(tmp_path / "p.toml"), reg)
    arm = profile.arms[0]
    return reg.backend(arm.backend)(arm, BackendContext(profile.run, str(tmp_path), lambda _: None)), profile


@needs_server
def test_server_steps_reach_the_listener_while_the_request_streams(tmp_path: Path) -> None:
    from lab.api import GenerationRequest
    from lab.base.events import Cell, StepEvent, TokenEvent

    backend, profile = _backend(tmp_path)
    run = profile.run
    backend.load(lambda _e: None)
    try:
        for round_ in (1, 2):
            cell = Cell("self", "p", round_)
            # (arrival order, clock) of each event at the listener
            steps: list[tuple[int, float, StepEvent]] = []
            tokens: list[tuple[int, float]] = []

            def listen(ev: Any, steps: list[tuple[int, float, StepEvent]] = steps,
                       tokens: list[tuple[int, float]] = tokens) -> None:
                order = len(steps) + len(tokens)
                if isinstance(ev, StepEvent):
                    steps.append((order, time.perf_counter(), ev))
                elif isinstance(ev, TokenEvent):
                    tokens.append((order, time.perf_counter()))

            request = GenerationRequest(cell, profile.prompts[0].text, None, True, run.max_tokens,
                                        0.0, 0, True, backend.arm.n_max)
            gen = backend.generate(request, listen, lambda: False)
            returned = time.perf_counter()
            rep = gen.engine_report
            assert len(gen.ids) == run.max_tokens
            events = [ev for _, _, ev in steps]
            assert len(events) > 2, rep
            # live: the first step arrived while tokens were still streaming,
            # well before generate() returned
            first_order, first_t, _ = steps[0]
            last_token_order, last_token_t = tokens[-1]
            assert first_order < last_token_order
            assert first_t < last_token_t < returned
            assert sum(1 for order, _ in tokens if order > first_order) > 0
            # every step but the last came before the stream's last token
            # when the log kept up; at least half did on any machine
            assert sum(1 for order, _, _ in steps if order < last_token_order) >= len(steps) // 2
            # per cell from 0 in every round
            assert [ev.index for ev in events] == list(range(len(events)))
            assert all(ev.cell == cell for ev in events)
            # the live steps add up to the server's own counters, exactly
            drafted = sum(ev.drafted for ev in events)
            accepted = sum(ev.accepted for ev in events)
            assert (drafted, accepted) == (rep["draft_n"], rep["draft_n_accepted"])
            assert drafted == rep["metrics_delta"]["spec_decode_num_draft_tokens_total"]
            assert accepted == rep["metrics_delta"]["spec_decode_num_accepted_tokens_total"]
            assert len(events) == rep["metrics_delta"]["spec_decode_num_drafts_total"]
            assert rep["counts_match_server"] is True, rep["checks"]
            # landed tokens: every token after the first is a step's or a plain one
            landed = sum(ev.landed for ev in events)
            assert landed + rep["plain_tokens_stream"] == len(gen.ids)
            # the model drafting for itself: everything drafted is accepted
            assert accepted == drafted
            # step seconds from the server's clocks, draft split after the request
            assert all(ev.step_s > 0 and ev.draft_s is None for ev in events)
            assert rep["draft_s_mean"] is not None and rep["draft_s_mean"] > 0
    finally:
        backend.close()
    assert not backend.child_pids()
