"""The oracle holds its rate whatever the verify path's numerics do.

A scripted target stands in for an engine whose verify batches pick another
token than a one-row decode at a few positions (what llama.cpp's CPU
kernels do to near ties): the baseline (one row at a time) then differs
from what the speculative loop produces, and only a drafter that rehearses
(lab.api.Rehearsing) can still propose what the loop will pick. The real
engine is held to the same in test_oracle_engine.py.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pytest
from lab_drafters.oracle import OracleDrafter, expected_acceptance

from lab.api import DrafterContext, GenerationRequest
from lab.base.events import Cell, StepEvent, TokenEvent
from lab.kit.speculative import TraceStep, generate

VOCAB = 97


class FlippingTarget:
    """Next token = a hash of the context; where ``flips`` holds a KV
    position, a row of a batch wider than one picks the next token up
    instead (a near tie the batch's kernels resolve the other way). With
    ``by_row`` the flip happens only on some rows of the batch, so where the
    steps start matters too (the hardest case for a rehearsal)."""

    def __init__(self, flips: set[int], n_ctx: int = 4096, by_row: bool = False) -> None:
        self.flips = flips
        self.by_row = by_row
        self.n_ctx = n_ctx
        self.n_vocab = VOCAB
        self.kv: list[int] = []
        self.rows: list[int] = []
        self.decodes = 0

    @property
    def n_past(self) -> int:
        return len(self.kv)

    def reset(self) -> None:
        self.kv = []

    def _next(self, ctx: Sequence[int], width: int, row: int) -> int:
        tok = (sum((i + 1) * t for i, t in enumerate(ctx[-3:])) * 31 + len(ctx)) % VOCAB
        flip = width > 1 and len(ctx) in self.flips and (not self.by_row or row % 2 == 1)
        return (tok + 1) % VOCAB if flip else tok

    def decode(self, ids: Sequence[int], all_logits: bool) -> None:
        self.decodes += 1
        start = len(self.kv)
        self.kv.extend(ids)
        wide = len(ids)
        ends = range(start + 1, len(self.kv) + 1) if all_logits else [len(self.kv)]
        self.rows = [self._next(self.kv[:e], wide, e - start - 1) for e in ends]

    def pick(self, row: int) -> int:
        return self.rows[row]

    def probs(self, row: int) -> np.ndarray:
        p = np.zeros(VOCAB)
        p[self.rows[row]] = 1.0
        return p

    def truncate(self, n_keep: int) -> None:
        del self.kv[n_keep:]

    def piece(self, token: int) -> bytes:
        return f"<{token}>".encode()


PROMPT = [5, 17, 42, 8]


def request(cell: Cell, n_max: int = 4, max_tokens: int = 200) -> GenerationRequest:
    return GenerationRequest(cell=cell, prompt="p", system=None, chat_template=False, max_tokens=max_tokens,
                             temperature=0.0, seed=0, ignore_eos=True, n_max=n_max)


def baseline(target: FlippingTarget, max_tokens: int = 200) -> list[int]:
    return generate(target, PROMPT, request(Cell("base", "p", 1), max_tokens=max_tokens), lambda e: None,
                    lambda: False).ids


def oracle(reference: Sequence[int], **options: Any) -> OracleDrafter:
    ctx = DrafterContext(stack="s", target_model=None, vocab_size=VOCAB, n_ctx=4096, threads=1, seed=0,
                         temperature=0.0, reference=lambda prompt, round: reference, log=lambda text: None)
    return OracleDrafter(options, ctx)


def run(target: FlippingTarget, drafter: OracleDrafter, round: int = 1, n_max: int = 4, max_tokens: int = 200,
        trace: list[TraceStep] | None = None) -> tuple[Any, list[StepEvent], list[TokenEvent]]:
    events: list[Any] = []
    gen = generate(target, PROMPT, request(Cell("oracle", "p", round), n_max, max_tokens), events.append,
                   lambda: False, drafter, None, trace)
    steps = [e for e in events if isinstance(e, StepEvent)]
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    return gen, steps, tokens


def rate(steps: Sequence[StepEvent]) -> float:
    return sum(s.accepted for s in steps) / sum(s.drafted for s in steps)


def test_the_scripted_engine_leaves_the_baseline_under_speculation() -> None:
    # The premise: replaying the baseline loses drafts after the first flip.
    target = FlippingTarget({40, 90, 150})
    ref = baseline(target)
    gen, steps, _ = run(target, oracle(ref, rehearse=False))
    assert gen.ids != ref
    assert rate(steps) < 0.9


def test_rehearsal_reaches_the_loops_own_output_and_every_draft_lands() -> None:
    target = FlippingTarget({40, 90, 150})
    ref = baseline(target)
    drafter = oracle(ref)
    gen, steps, tokens = run(target, drafter)
    assert rate(steps) == 1.0
    assert gen.engine_report["rehearsals"] >= 2  # one pass per flip it had to learn, then a confirming one
    # The rehearsal emitted nothing: the events are exactly the timed pass's.
    assert [t for e in tokens for t in e.ids] == gen.ids
    assert [s.index for s in steps] == list(range(len(steps)))


def test_a_confirmed_transcript_serves_later_rounds_without_another_pass() -> None:
    target = FlippingTarget({40, 90})
    ref = baseline(target)
    drafter = oracle(ref)
    run(target, drafter, round=1)
    before = target.decodes
    gen, steps, _ = run(target, drafter, round=2)
    assert gen.engine_report["rehearsals"] == 0
    assert rate(steps) == 1.0
    assert target.decodes - before == len(steps) + 1  # the prompt and the timed steps, nothing else


def test_rehearsal_is_capped() -> None:
    # More flips than passes: the cap holds, and what was learnt still helps.
    flips = set(range(20, 200, 3))
    target = FlippingTarget(flips, by_row=True)
    ref = baseline(target)
    gen, steps, _ = run(target, oracle(ref))
    assert rate(steps) < 1.0  # no fixed point within the cap
    assert gen.engine_report["rehearsals"] == OracleDrafter.max_rehearsals
    unrehearsed = run(target, oracle(ref, rehearse=False))[1]
    assert rate(steps) > rate(unrehearsed)


@pytest.mark.parametrize("acceptance", [0.3, 0.55, 0.7, 0.9])
@pytest.mark.parametrize("n_max", [2, 4, 7])
def test_the_configured_acceptance_is_held(acceptance: float, n_max: int) -> None:
    target = FlippingTarget({40, 90, 150})
    ref = baseline(target, 300)
    gen, steps, _ = run(target, oracle(ref, acceptance=acceptance), n_max=n_max, max_tokens=300)
    drafted = sum(s.drafted for s in steps)
    assert abs(rate(steps) - acceptance) <= 1.0 / drafted + 1e-9


def test_error_rate_draws_are_fixed_per_position_and_follow_the_documented_rate() -> None:
    target = FlippingTarget(set())
    ref = baseline(target, 400)
    runs = [run(target, oracle(ref, error_rate=0.2, seed=3), n_max=4, max_tokens=400) for _ in range(2)]
    # The same drafts every time: rounds repeat one experiment.
    assert [(s.drafted, s.accepted) for s in runs[0][1]] == [(s.drafted, s.accepted) for s in runs[1][1]]
    # Per-token acceptance is 1 - error_rate: accepted over drafts tried up to the first wrong one.
    steps = runs[0][1]
    tried = sum(s.accepted + (s.accepted < s.drafted) for s in steps)
    per_token = sum(s.accepted for s in steps) / tried
    assert abs(per_token - 0.8) < 0.08  # ~300 draws: a few standard errors
    assert abs(rate(steps) - expected_acceptance(0.2, 4)) < 0.1


def test_acceptance_and_error_rate_do_not_mix() -> None:
    with pytest.raises(ValueError, match="not both"):
        oracle([1, 2, 3], acceptance=0.5, error_rate=0.1)


def test_expected_acceptance_matches_a_simulation() -> None:
    rng = np.random.default_rng(0)
    e, k = 0.3, 5
    wrong = rng.random((200_000, k)) < e
    kept = np.where(wrong.any(axis=1), wrong.argmax(axis=1), k)
    assert abs(kept.mean() / k - expected_acceptance(e, k)) < 0.005


def test_the_trace_replays_the_cells_decodes() -> None:
    target = FlippingTarget({40})
    ref = baseline(target)
    trace: list[TraceStep] = []
    gen, steps, _ = run(target, oracle(ref, acceptance=0.6), trace=trace)
    verifies = [t for t in trace if t.verify]
    assert len(verifies) == len(steps)
    assert [t.accepted for t in verifies] == [s.accepted for s in steps]
    # Every output token after the prompt's comes from exactly one traced decode.
    assert sum(t.landed for t in trace) == len(gen.ids) - 1
    for t in trace:
        assert gen.ids[t.out_index - 1] == t.tokens[0]  # each decode starts from the newest token
