"""The oracle drafter: it proposes what the target will pick, with wrong
tokens at a known rate, so it measures a step's cost at a known acceptance.

On a greedy cell it rehearses (:class:`lab.api.Rehearsing`) until the loop's
output equals its transcript. ``acceptance`` a keeps accepted at floor(a x
drafted + phase); ``error_rate`` e makes each draft wrong with chance e."""

from __future__ import annotations

import hashlib
import math
from typing import Any, Mapping, Sequence

from lab.api import Draft, Drafter, DrafterContext, Option, Rehearsing
from lab.base.events import Cell


def expected_acceptance(error_rate: float, k: int) -> float:
    """accepted / drafted that per-token errors at ``error_rate`` give with
    steps of ``k`` drafts: a step keeps its drafts up to the first wrong one."""
    if error_rate <= 0:
        return 1.0
    if error_rate >= 1 or k <= 0:
        return 0.0
    keep = 1.0 - error_rate
    return keep * (1.0 - keep**k) / (error_rate * k)


def _unit(*parts: object) -> tuple[float, int]:
    """A uniform draw in [0, 1) and a 64-bit integer, fixed by ``parts``."""
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=16).digest()
    return int.from_bytes(digest[:8], "little") / 2.0**64, int.from_bytes(digest[8:], "little")


class OracleDrafter(Drafter, Rehearsing):
    name = "oracle"
    description = "drafts what the target will pick (calibrates step cost at a known acceptance)"
    options = (
        Option("acceptance", float, 1.0,
               "accepted / drafted over a cell (greedy), held within 1/drafted by placing wrong drafts after the "
               "right ones", min=0, max=1),
        Option("error_rate", float, 0.0,
               "probability that a drafted token is wrong, drawn per output position: per-token acceptance "
               "1 - error_rate, accepted / drafted expected at (1-e)(1-(1-e)^k)/(e k) for k drafts a step; "
               "not with acceptance < 1", min=0, max=1),
        Option("seed", int, 0, "seed for where the wrong drafts go", min=0, max=2**32 - 1),
        Option("rehearse", bool, True,
               "before a greedy cell's timed pass, run the loop untimed until its output is the transcript the "
               "oracle replays (false: replay the baseline as it is)"),
    )
    needs_baseline = True

    def __init__(self, options: Mapping[str, Any], ctx: DrafterContext) -> None:
        super().__init__(options, ctx)
        self.acceptance = float(self.opts.get("acceptance", 1.0))
        self.error_rate = float(self.opts.get("error_rate", 0.0))
        if not 0.0 <= self.error_rate <= 1.0:
            raise ValueError("oracle error_rate must be within [0, 1]")
        if not 0.0 <= self.acceptance <= 1.0:
            raise ValueError("oracle acceptance must be within [0, 1]")
        if self.error_rate > 0 and self.acceptance < 1:
            raise ValueError("oracle: give acceptance or error_rate, not both")
        self.seed = int(self.opts.get("seed", 0))
        self.rehearse = bool(self.opts.get("rehearse", True))
        self._ref: Sequence[int] = ()
        self._prompt = ""
        self._n_prompt = 0
        self._phase = 0.0
        self._drafted = 0
        self._accepted = 0
        # (prompt, baseline ids) -> [transcript, whether it is a fixed point]
        self._learned: dict[tuple[str, tuple[int, ...]], list[Any]] = {}
        self._key: tuple[str, tuple[int, ...]] = ("", ())

    def wants_rehearsal(self, prompt_ids: Sequence[int], cell: Cell) -> bool:
        if not self.rehearse:
            return False
        ref = self._baseline(cell)
        entry = self._learned.setdefault((cell.prompt, tuple(ref)), [list(ref), False])
        return not entry[1]

    def rehearsed(self, output_ids: Sequence[int]) -> None:
        entry = self._learned[self._key]
        out = list(output_ids)
        if out == entry[0]:
            entry[1] = True
            return
        first = next((i for i, (a, b) in enumerate(zip(out, entry[0])) if a != b), min(len(out), len(entry[0])))
        self.ctx.log(f"oracle: prompt {self._prompt!r}: the loop left the transcript at output token {first}; "
                     "replaying its own output")
        entry[0] = out

    def _baseline(self, cell: Cell) -> Sequence[int]:
        ref = self.ctx.reference(cell.prompt, cell.round)
        if ref is None:
            raise RuntimeError(f"oracle: no baseline tokens for prompt {cell.prompt!r}; the baseline arm must run first")
        return ref

    def begin(self, prompt_ids: Sequence[int], cell: Cell) -> None:
        ref = self._baseline(cell)
        self._key = (cell.prompt, tuple(ref))
        entry = self._learned.get(self._key)
        self._ref = entry[0] if entry is not None and self.ctx.temperature <= 0 else ref
        self._prompt = cell.prompt
        self._n_prompt = len(prompt_ids)
        self._phase = _unit(self.seed, cell.prompt, "phase")[0]
        self._drafted = 0
        self._accepted = 0

    def draft(self, context: Sequence[int], k: int) -> Draft:
        pos = len(context) - self._n_prompt
        tokens = list(self._ref[pos : pos + k])
        if not tokens:
            return Draft(())
        k = len(tokens)
        wrong: list[int] = []
        if self.error_rate > 0:
            wrong = [i for i in range(k) if _unit(self.seed, self._prompt, pos + i)[0] < self.error_rate]
        elif self.acceptance < 1:
            keep = math.floor(self.acceptance * (self._drafted + k) + self._phase) - self._accepted
            keep = max(0, min(k, keep))
            # Drafts after the first wrong one are never kept (greedy), so one suffices.
            wrong = [keep] if keep < k else []
        self._drafted += k
        self._accepted += wrong[0] if wrong else k
        vocab = max(self.ctx.vocab_size, 2)
        for i in wrong:
            shift = 1 + _unit(self.seed, self._prompt, pos + i, "token")[1] % (vocab - 1)
            tokens[i] = (tokens[i] + shift) % vocab
        return Draft(tuple(tokens))
