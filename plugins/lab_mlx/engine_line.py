"""What a user runs for an arm of the lab's MLX loops with the engines' own
tools (``Backend.engine_command``): mlx-lm's ``mlx_lm.generate`` for a
baseline and a draft model, z-lab's ``dflash generate mlx`` (the write-ups'
MLX tool) for a DFlash draft. Their loops are not the lab's: an engine arm
(``mlx-lm``, ``zlab-dflash``) measures each on the same files."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from lab.api import EngineCommand
from lab.kit.command_line import (
    ZLAB_RAW_NOTE,
    draft_pair_problem,
    gguf_problem,
    mlx_lm_generate,
    zlab_dflash_generate,
    zlab_draft_notes,
)

if TYPE_CHECKING:
    from lab.base.profile import Arm, RunSettings


def _thinking(opts: Mapping[str, Any]) -> bool | None:
    # only a switch turned off is written: on is the chat template's own default
    return False if opts.get("enable_thinking") is False else None


def mlx_command(arm: Arm, run: RunSettings, opts: Mapping[str, Any]) -> EngineCommand:
    """The ``mlx`` backend: mlx-lm's generation, plain or with the
    draft-model drafter's model."""
    if arm.model is None:
        return EngineCommand((), ("the arm names no model",))
    problem = gguf_problem(arm.model, "target")
    if problem:
        return EngineCommand((), (problem,))
    loop = "measured on the lab's loop on MLX; mlx-lm's own loop differs (an mlx-lm arm measures it)"
    if arm.drafter is None:
        argv = mlx_lm_generate(arm.model, max_tokens=run.max_tokens, temperature=run.temperature,
                               enable_thinking=_thinking(opts), chat_template=run.chat_template)
        return EngineCommand(tuple(argv), (loop,))
    draft = arm.drafter_options.get("model")
    if arm.drafter != "draft-model" or not draft:
        return EngineCommand((), (f"the {arm.drafter} drafter runs only in the lab's loop: mlx-lm drafts only "
                                  "with a draft model",))
    problem = gguf_problem(str(draft), "draft")
    if problem:
        return EngineCommand((), (problem,))
    argv = mlx_lm_generate(arm.model, max_tokens=run.max_tokens, temperature=run.temperature, draft=str(draft),
                           num_draft_tokens=arm.n_max, enable_thinking=_thinking(opts),
                           chat_template=run.chat_template)
    return EngineCommand(tuple(argv), (loop,))


def dflash_command(arm: Arm, run: RunSettings, opts: Mapping[str, Any]) -> EngineCommand:
    """The ``mlx-dflash`` backend: z-lab's ``dflash generate mlx`` on the
    same target and draft, block n_max + 1, draft bits as the arm's."""
    problem = draft_pair_problem(arm.model, opts.get("draft"))
    if problem or arm.model is None:
        return EngineCommand((), (problem or "the arm names no model or no draft",))
    draft = str(opts["draft"])
    notes = ["measured on the lab's DFlash loop; z-lab's loop differs (a zlab-dflash arm measures it)"]
    bits = int(opts.get("draft_bits") or 0)
    if bits not in (0, 4, 8):
        notes.append(f"draft_bits {bits}: z-lab's --draft-bits takes 4 or 8 only, so the line keeps the draft as stored")
        bits = 0
    if int(opts.get("draft_group_size") or 64) != 64:
        notes.append("z-lab's --draft-bits quantizes in groups of 64; the arm used "
                     f"{opts.get('draft_group_size')}")
    notes += zlab_draft_notes(draft)
    if not run.chat_template:
        notes.append(ZLAB_RAW_NOTE)
    block = arm.n_max + 1 if arm.n_max else int(opts.get("block_size") or 0) or None
    argv = zlab_dflash_generate(arm.model, draft, block_size=block, draft_bits=bits, max_tokens=run.max_tokens,
                                temperature=run.temperature, enable_thinking=_thinking(opts))
    return EngineCommand(tuple(argv), tuple(notes))


MTP_NONE = ("no engine's own tool runs an MTP head on MLX (mlx-lm and z-lab's dflash have no such path); "
            "the lab's loop is the only one")
