"""Built-in drafters: ngram (prompt lookup), oracle (replays the baseline),
draft-model (a smaller model of the same vocabulary). Registered through the
``lab.drafters`` entry-point group like any third-party drafter."""

from __future__ import annotations

from typing import Callable

from lab.api import Drafter
from lab.hookspecs import hookimpl


@hookimpl
def lab_register_drafters(register: Callable[[type[Drafter]], None]) -> None:
    from lab_drafters.draft_model import DraftModelDrafter
    from lab_drafters.ngram import NgramDrafter
    from lab_drafters.oracle import OracleDrafter

    register(NgramDrafter)
    register(OracleDrafter)
    register(DraftModelDrafter)
