"""The arm key ``acceptance`` (:mod:`lab.base.set_acceptance`):

    acceptance = 0.7                          # one per-token chance
    acceptance = { rates = [0.9, 0.8, 0.6] }  # unconditional, per position
    acceptance = { mean_length = 3.5 }        # tokens landed per step
    acceptance = [0.5, 0.7, 0.9]              # a sweep: one arm per value
    acceptance = { prose = 0.6, code = { mean_length = 3.5 } }  # per prompt

A per-prompt table names every prompt and makes one arm per prompt (a
server takes its rates when it starts)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from lab.base.profile import Arm
from lab.base.set_acceptance import AcceptanceError, SetAcceptance, check_rates
from lab.profile.errors import KeyPath, Source
from lab.profile.read import got, no_unknown

KEY = "acceptance"
# Positions a rates list may give: n_max's own bound.
MAX_RATES = 1024


def parse(src: Source, raw: Any, key: KeyPath) -> tuple[SetAcceptance | None, ...]:
    """The values of the arm's acceptance axis (None alone when not set)."""
    if raw is None:
        return (None,)
    if isinstance(raw, list):
        if not raw:
            raise src.error(key, "an empty list sweeps nothing")
        for i, v in enumerate(raw):
            if _per_prompt(v):
                raise src.error([*key, i], "a table of settings per prompt cannot be swept: give it alone")
        return tuple(_one(src, v, [*key, i]) for i, v in enumerate(raw))
    if _per_prompt(raw):
        if not raw:
            raise src.error(key, "an empty table sets nothing: give a chance, rates, mean_length or one setting per prompt")
        out = []
        for prompt, v in raw.items():
            if isinstance(v, list) or _per_prompt(v):
                raise src.error([*key, prompt], f"the setting for prompt {prompt!r} is one chance or one table "
                                                "with rates or mean_length, not a sweep or another table of prompts")
            out.append(replace(_one(src, v, [*key, prompt]), prompt=prompt))
        return tuple(out)
    return (_one(src, raw, key),)


def _per_prompt(raw: Any) -> bool:
    """A table keyed by prompt names, not one with rates or mean_length."""
    return isinstance(raw, dict) and not any(k in raw for k in ("rates", "mean_length"))


def check_prompts(src: Source, values: tuple[SetAcceptance | None, ...], prompts: tuple[str, ...], key: KeyPath) -> None:
    """A table of settings per prompt names the profile's prompts, all of them."""
    named = [v.prompt for v in values if v is not None and v.prompt is not None]
    if not named:
        return
    for p in named:
        if p not in prompts:
            raise src.error([*key, p], f"no prompt named {p!r} (prompts: {', '.join(prompts)}); a table here is either "
                                       "rates or mean_length, or one setting per prompt name")
    missing = [p for p in prompts if p not in named]
    if missing:
        raise src.error(key, f"acceptance is set per prompt but not for {', '.join(repr(p) for p in missing)}: "
                             "give every prompt its setting (an arm per prompt runs that prompt only)")


def _one(src: Source, raw: Any, key: KeyPath) -> SetAcceptance:
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        p = float(raw)
        if not (math.isfinite(p) and 0.0 <= p <= 1.0):
            raise src.error(key, f"a per-token acceptance is a chance in [0, 1], got {got(raw)}")
        return SetAcceptance("rate", p)
    if not isinstance(raw, dict):
        raise src.error(key, f"expected a chance in [0, 1] or a table with rates or mean_length, got {got(raw)}")
    no_unknown(src, raw, ("rates", "mean_length"), key)
    if len(raw) != 1:
        raise src.error(key, "give exactly one of rates (per position) or mean_length (tokens per step)")
    if "rates" in raw:
        rates = raw["rates"]
        if not isinstance(rates, list) or len(rates) > MAX_RATES:
            raise src.error([*key, "rates"], f"expected an array of at most {MAX_RATES} chances, got {got(rates)}")
        problem = check_rates(rates)
        if problem:
            raise src.error([*key, "rates"], problem)
        return SetAcceptance("rates", tuple(float(r) for r in rates))
    length = raw["mean_length"]
    if not (isinstance(length, (int, float)) and not isinstance(length, bool) and math.isfinite(length) and length >= 1):
        raise src.error([*key, "mean_length"], f"a mean length counts the target's own token too: at least 1, got {got(length)}")
    return SetAcceptance("mean_length", float(length))


def check(src: Source, arm: Arm, sets_acceptance: bool, drafts: bool, key: KeyPath) -> None:
    """What one expanded arm decides: its backend honours set acceptance, the
    arm drafts, and the setting resolves at its n_max."""
    if arm.acceptance is None:
        return
    if not sets_acceptance:
        raise src.error(key, f"backend {arm.backend!r} cannot set acceptance: drop acceptance or use a backend that can")
    if not drafts or not arm.n_max:
        raise src.error(key, "acceptance is set on arms that draft: give a drafter (or a speculative type) and n_max")
    try:
        arm.acceptance.rates(arm.n_max)
    except AcceptanceError as exc:
        raise src.error(key, str(exc)) from None
