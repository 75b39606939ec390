"""mlx-lm's ``stream_generate`` as a user runs it, plain or with
``draft_model``. A step is a run of ``from_draft`` tokens closed by one target
token, ``min(num_draft_tokens, tokens left)`` drafted (mlx-lm's rule); its
seconds are when its tokens reached the lab."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping

from lab.api import EngineCommand, Generation, GenerationRequest, Option, with_defaults
from lab.base.events import Emit
from lab.kit import models
from lab.kit.engine_loop import EngineBackend, EngineCell, MaskedEnds, end_bias, end_ids, engine_version, lab_loop

if TYPE_CHECKING:
    from lab.base.footprint import MemoryNeeds
    from lab.base.profile import Arm, RunSettings

INSTALL = 'pip install mlx-lm (or pip install -e ".[mlx]")'


class MlxLmBackend(EngineBackend):
    name = "mlx-lm"
    draft: Any = None
    draft_bias: Any = None
    num_draft = 0
    # looked up, not imported: mlx-lm's import brings transformers in (seconds)
    engine_checks = (("mlx-lm", ("mlx_lm",), INSTALL),)
    description = "mlx-lm's own generation (stream_generate), plain or speculative with an MLX draft model"
    options = (
        Option("draft_model", str, None, "an MLX draft model directory (mlx-lm's --draft-model); none: plain generation",
               model_ref=True),
        Option("num_draft_tokens", int, 0, "tokens drafted per step (mlx-lm's --num-draft-tokens; 0: the arm's n_max, "
               "else mlx-lm's default of 2)", min=0, max=64),
        Option("prefill_step_size", int, 2048, "prompt tokens per prefill chunk (mlx-lm's --prefill-step-size)", min=1),
        Option("kv_bits", int, 0, "quantize the KV cache (mlx-lm's --kv-bits; 0: off)", choices=(0, 2, 3, 4, 6, 8)),
        Option("enable_thinking", bool, True, "passed to the chat template (Qwen3-style thinking switch)"),
    )

    @classmethod
    def is_speculative(cls, arm_options: Mapping[str, Any], drafter: str | None) -> bool:
        return bool(arm_options.get("draft_model"))

    @classmethod
    def engine_command(cls, arm: Arm, run: RunSettings) -> EngineCommand | None:
        """``mlx_lm.generate`` with the arm's flags, the drafted tokens written out."""
        from lab.kit.command_line import gguf_problem, mlx_lm_generate

        opts = with_defaults(cls.options, arm.options)
        if arm.model is None:
            return EngineCommand((), ("the arm names no model",))
        draft = str(opts["draft_model"]) if opts["draft_model"] else None
        for ref, role in ((arm.model, "target"), (draft, "draft")):
            problem = gguf_problem(ref, role) if ref else None
            if problem:
                return EngineCommand((), (problem,))
        argv = mlx_lm_generate(
            arm.model, max_tokens=run.max_tokens, temperature=run.temperature, draft=draft,
            # a predicted n_max replaces the arm's, as in load()
            num_draft_tokens=arm.n_max or int(opts["num_draft_tokens"] or 0) or 2,
            enable_thinking=False if opts["enable_thinking"] is False else None,
            prefill_step_size=int(opts["prefill_step_size"]), kv_bits=int(opts["kv_bits"] or 0),
            chat_template=run.chat_template,
        )
        return EngineCommand(tuple(argv))

    @classmethod
    def memory_needs(cls, arm: Arm, run: RunSettings) -> MemoryNeeds | None:
        """mlx-lm's caches grow with the tokens held (kv_bits quantizes
        them); a prompt goes in prefill_step_size chunks whose logits it
        never computes, a verify pass returns num_draft_tokens + 1 rows."""
        import platform

        from lab.base.footprint import MLX, MemoryNeeds, ModelLoad

        if arm.model is None:
            return None
        rows = min(int(arm.options.get("prefill_step_size") or 2048), run.n_ctx)
        width = int(arm.options.get("num_draft_tokens") or 0) or arm.n_max or 2
        kv_bits = int(arm.options.get("kv_bits") or 0)
        draft = arm.options.get("draft_model")
        loads = [ModelLoad("target", arm.model, run.n_ctx, n_ubatch=rows, n_outputs=width + 1 if draft else 1,
                           n_verify=width + 1 if draft else 1, kv_bits=kv_bits)]
        if draft:
            loads.append(ModelLoad("draft", str(draft), run.n_ctx, n_ubatch=rows, n_outputs=1, kv_bits=kv_bits))
        apple = platform.system() == "Darwin" and platform.machine() == "arm64"
        # the process: the mlx backend's figure (MLX and mlx-lm imported)
        return MemoryNeeds(MLX, tuple(loads), accelerated=apple, process_bytes=430 << 20,
                          process_before_load=413 << 20)

    def load(self, emit: Emit) -> None:
        from mlx_lm import load

        self._load_target(emit, load, "loading target (mlx_lm.load)")
        if self.opts["draft_model"]:
            self._loading(emit, "loading draft (mlx_lm.load)", 0.6)
            draft = load(str(models.resolve(str(self.opts["draft_model"]))))[0]
            # masked like the target, as a logits processor given to mlx-lm would be on both
            self.draft = MaskedEnds(draft)
            self.draft_bias = end_bias(draft, end_ids(self.tokenizer._tokenizer))  # noqa: SLF001 - mlx-lm's TokenizerWrapper keeps the Hugging Face tokenizer there only
            n_max = self.arm.n_max
            asked = int(self.opts["num_draft_tokens"] or 0)
            if asked and n_max and asked != n_max:
                raise ValueError(f"num_draft_tokens {asked} but n_max {n_max}: give one, or the same")
            self.num_draft = asked or n_max or 2

    def _generate(self, request: GenerationRequest, emit: Emit, cancelled: Callable[[], bool]) -> Generation:
        import mlx.core as mx
        from mlx_lm.generate import stream_generate
        from mlx_lm.sample_utils import make_sampler

        tok = self.tokenizer
        rendered, prompt = self._prompt(request, tok._tokenizer)  # noqa: SLF001 - mlx-lm's wrapper keeps the Hugging Face tokenizer there only
        eos = self._ignore_eos(request)
        if self.draft is not None:
            self.draft.bias = self.draft_bias if request.ignore_eos else None
        mx.random.seed(request.seed)
        extra: dict[str, Any] = {"prefill_step_size": int(self.opts["prefill_step_size"])}
        if self.opts["kv_bits"]:
            extra["kv_bits"] = int(self.opts["kv_bits"])
        if self.draft is not None:
            extra |= {"draft_model": self.draft, "num_draft_tokens": self.num_draft}
        cell = EngineCell(request, emit)
        run = 0  # drafted tokens the target kept in the step under way
        left_at_step = request.max_tokens
        last: Any = None
        flagged = 0  # tokens the engine marked from_draft
        step_s = 0.0
        try:
            for resp in stream_generate(self.model, tok, prompt, max_tokens=request.max_tokens,
                                        sampler=make_sampler(temp=request.temperature), **extra):
                last = resp
                cell.check(cancelled)
                if run == 0:  # a step's tokens arrive together: its seconds end at its first
                    step_s = cell.since_last()
                cell.land([int(resp.token)], resp.text, bool(resp.from_draft))
                flagged += bool(resp.from_draft)
                if self.draft is None:
                    continue
                if resp.from_draft:
                    run += 1
                    if len(cell.ids) < request.max_tokens:
                        continue
                # a target token closes the step; so does the budget running out mid-run
                landed = run + (0 if resp.from_draft else 1)
                drafted = min(self.num_draft, left_at_step)
                cell.step(drafted, run, landed, step_s)
                run = 0
                left_at_step = request.max_tokens - len(cell.ids)
        finally:
            tok.eos_token_ids = eos
        report: dict[str, Any] = {"engine": f"mlx-lm {engine_version('mlx-lm')}", **self._memory(), **rendered.report()}
        if last is not None:
            report |= {"engine_generation_tps": float(last.generation_tps), "engine_prompt_tps": float(last.prompt_tps),
                       "engine_generation_tokens": int(last.generation_tokens)}
        if self.draft is None:
            report["lab_loop"] = lab_loop("mlx")
            report["loop_differences"] = []
        else:
            report["lab_loop"] = lab_loop("mlx", "draft-model", model=str(self.opts["draft_model"]))
            # the first step's seconds run from the request: mlx-lm's first token comes after a verify
            report |= {"num_draft_tokens": self.num_draft, "from_draft_tokens": flagged,
                       "first_step_includes_prompt": True,
                       "loop_differences": ["its first token comes from the first verify, not from prompt "
                                            "processing, so its generation clock (as mlx-lm's own tok/s) starts "
                                            "after one step"]}
        return self._finish(cell, len(prompt), report)

    def close(self) -> None:
        self.draft = None
        super().close()
