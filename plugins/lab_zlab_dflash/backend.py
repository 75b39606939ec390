"""z-lab's ``dflash.model_mlx.stream_generate`` as its ``dflash generate mlx`` command
runs it (``--draft-bits`` quantizes the draft at load, group 64). After the
first token each yield is one step: ``min(block_size, tokens left + 1) - 1``
drafted (the engine's rule), the accepted ones plus the target's landed; a
step's seconds are when its yield reached the lab."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from lab.api import Check, EngineCommand, Generation, GenerationRequest, Option, with_defaults
from lab.base.events import Emit
from lab.kit import models
from lab.kit.checks import package_check
from lab.kit.engine_loop import (
    EngineBackend,
    EngineCell,
    engine_version,
    lab_loop,
    load_local,
)

if TYPE_CHECKING:
    from lab.base.footprint import MemoryNeeds
    from lab.base.profile import Arm, RunSettings

# z-lab's package pins tqdm, datasets and requests; its MLX module needs none of them
INSTALL = "pip install --no-deps dflash==0.1.0"


def doctor_checks() -> list[Check]:
    from lab.kit import mlx_platform

    gone = mlx_platform.unavailable()
    if gone:
        return [Check("dflash", False, f"{gone} (backend zlab-dflash)")]
    return [package_check("dflash", "dflash", INSTALL)]


class ZlabDFlashBackend(EngineBackend):
    name = "zlab-dflash"
    draft: Any = None
    block_size = 0
    engine_checks = (("mlx-lm", ("mlx_lm",), 'pip install -e ".[mlx]"'),
                     ("dflash (z-lab)", ("dflash", "huggingface_hub"), INSTALL))
    description = "z-lab's dflash package (dflash generate mlx): its loader and DFlash / DFlash 2 loop on MLX"
    options = (
        Option("draft", str, None, "the DFlash draft checkpoint directory (config.json with dflash_config + safetensors)",
               required=True, model_ref=True),
        Option("block_size", int, 0, "dflash's --block-size, the last target token included (0: n_max + 1 if the arm "
               "sets n_max, else the draft's own)", min=0, max=1025),
        Option("draft_bits", int, 0, "dflash's --draft-bits: quantize the draft at load (0: as stored)", choices=(0, 4, 8)),
        Option("prefill_step_size", int, 2048, "prompt tokens per prefill chunk", min=1),
        Option("enable_thinking", bool, True, "passed to the chat template (dflash's --reasoning off is false)"),
    )

    @classmethod
    def engine_command(cls, arm: Arm, run: RunSettings) -> EngineCommand | None:
        """z-lab's ``dflash generate mlx`` with the arm's block and draft bits."""
        from lab.kit.command_line import ZLAB_RAW_NOTE, draft_pair_problem, zlab_dflash_generate, zlab_draft_notes

        opts = with_defaults(cls.options, arm.options)
        problem = draft_pair_problem(arm.model, opts["draft"])
        if problem or arm.model is None:
            return EngineCommand((), (problem or "the arm names no model or no draft",))
        draft = str(opts["draft"])
        notes = zlab_draft_notes(draft) + ([] if run.chat_template else [ZLAB_RAW_NOTE])
        if int(opts["prefill_step_size"]) != 2048:
            notes.append(f"prefill_step_size {opts['prefill_step_size']}: z-lab's command has no flag for it "
                         "(its loop prefills 2048 tokens at a time)")
        block = arm.n_max + 1 if arm.n_max else int(opts["block_size"] or 0) or None
        argv = zlab_dflash_generate(arm.model, draft, block_size=block, draft_bits=int(opts["draft_bits"] or 0),
                                    max_tokens=run.max_tokens, temperature=run.temperature,
                                    enable_thinking=False if opts["enable_thinking"] is False else None)
        return EngineCommand(tuple(argv), tuple(notes))

    @classmethod
    def memory_needs(cls, arm: Arm, run: RunSettings) -> MemoryNeeds | None:
        """dflash's MLX target and its draft (quantized at load to
        draft_bits, group 64), the prompt in prefill_step_size chunks."""
        import platform

        from lab.base.footprint import MLX, MemoryNeeds, ModelLoad

        if arm.model is None or not arm.options.get("draft"):
            return None
        rows = min(int(arm.options.get("prefill_step_size") or 2048), run.n_ctx)
        block = int(arm.options.get("block_size") or 0) or (arm.n_max or 15) + 1
        loads = (
            ModelLoad("target", arm.model, run.n_ctx, n_ubatch=rows, n_outputs=block, n_verify=block),
            ModelLoad("draft", str(arm.options["draft"]), run.n_ctx, n_ubatch=rows, n_outputs=block, n_verify=block,
                      weight_bits=int(arm.options.get("draft_bits") or 0)),
        )
        apple = platform.system() == "Darwin" and platform.machine() == "arm64"
        return MemoryNeeds(MLX, loads, accelerated=apple, process_bytes=430 << 20,
                          process_before_load=413 << 20)

    def load(self, emit: Emit) -> None:
        import mlx.core as mx
        from dflash import model_mlx
        from mlx import nn

        self._load_target(emit, model_mlx.load, "loading target (dflash.model_mlx.load)")
        self._loading(emit, "loading draft (dflash.model_mlx.load_draft)", 0.6)
        # load_draft takes a hub id and downloads it; a profile names a local checkpoint
        self.draft = load_local(model_mlx, model_mlx.load_draft, models.resolve(str(self.opts["draft"])))
        if self.opts["draft_bits"]:
            nn.quantize(self.draft, group_size=64, bits=int(self.opts["draft_bits"]))
            mx.eval(self.draft.parameters())
        self.block_size = self._block_size(int(self.draft.config.block_size))

    def _generate(self, request: GenerationRequest, emit: Emit, cancelled: Callable[[], bool]) -> Generation:
        import mlx.core as mx
        from dflash.model_mlx import stream_generate

        tok = self.tokenizer
        rendered, prompt = self._prompt(request, tok._tokenizer)  # noqa: SLF001 - mlx-lm's wrapper keeps the Hugging Face tokenizer there only
        eos = self._ignore_eos(request)
        mx.random.seed(request.seed)
        cell = EngineCell(request, emit)
        yields: list[int] = []  # tokens per yield, as the engine gave them
        last: Any = None
        try:
            for resp in stream_generate(self.model, self.draft, tok, mx.array(prompt), block_size=self.block_size,
                                        max_tokens=request.max_tokens, temperature=request.temperature,
                                        prefill_step_size=int(self.opts["prefill_step_size"])):
                cell.check(cancelled)
                last = resp
                if not resp.tokens:
                    if resp.text:  # the detokenizer's tail at the end
                        cell.land([], resp.text, False)
                    continue
                if not cell.ids:
                    cell.land(resp.tokens, resp.text, False)  # from prompt processing, no step
                    yields.append(len(resp.tokens))
                    continue
                before = len(cell.ids)
                step_s = cell.since_last()
                landed = len(resp.tokens)
                drafted = min(self.block_size, request.max_tokens - before + 1) - 1
                accepted = min(landed - 1, drafted)
                if accepted:
                    cell.land(resp.tokens[:accepted], "", True)
                cell.land(resp.tokens[accepted:], resp.text, False)
                cell.step(drafted, accepted, landed, step_s)
                yields.append(landed)
        finally:
            tok.eos_token_ids = eos
        report: dict[str, Any] = {
            "engine": f"dflash {engine_version('dflash')}", "block_size": self.block_size,
            "draft_bits": int(self.opts["draft_bits"]), "engine_yields": yields,
            **self._memory(), **rendered.report(),
            "lab_loop": lab_loop("mlx-dflash", draft=str(self.opts["draft"]), draft_bits=int(self.opts["draft_bits"])),
            "loop_differences": ["its last step drafts up to the budget's end, one token more than the lab's"],
        }
        if last is not None:
            report |= {"engine_generation_tps": float(last.generation_tps), "engine_prompt_tps": float(last.prompt_tps)}
        return self._finish(cell, len(prompt), report)

    def close(self) -> None:
        self.draft = None
        super().close()

