"""mlx-lm's ``stream_generate`` as the engine runs it for a user: its
loader, its loop, its speculative decoding with ``draft_model`` and
``num_draft_tokens``.

Steps come from the engine's per-token ``from_draft`` flags: a run of
drafted tokens closed by one target token is one step. mlx-lm drafts
``min(num_draft_tokens, tokens left)`` each step (its loop's rule, exact,
not estimated). It reports no per-step seconds: a step's seconds are when
its tokens reached the lab; draft and verify are not measured."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping

from lab.api import Backend, BackendContext, EngineOOM, Generation, GenerationRequest, MissingEngine, Option
from lab.base.events import Emit, Status, StatusChanged, arm_cell
from lab.kit import models
from lab.kit.engine_loop import EngineCell, MaskedEnds, end_ids, engine_version, lab_loop
from lab.kit.prompting import render_prompt

if TYPE_CHECKING:
    from lab.base.profile import Arm

INSTALL = 'pip install mlx-lm (or pip install -e ".[mlx]")'
_OOM = ("malloc", "out of memory", "unable to allocate")


class MlxLmBackend(Backend):
    name = "mlx-lm"
    stack = "mlx"
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
    def needs_model(cls, arm_options: Mapping[str, Any]) -> bool:
        return True

    @classmethod
    def is_speculative(cls, arm_options: Mapping[str, Any], drafter: str | None) -> bool:
        return bool(arm_options.get("draft_model"))

    @classmethod
    def missing_engine(cls, arm_options: Mapping[str, Any]) -> MissingEngine | None:
        from lab.kit.checks import import_failure

        # looked up, not imported: mlx-lm's import brings transformers in (seconds)
        why = import_failure("mlx.core", found=("mlx_lm",))
        return MissingEngine("mlx-lm", why, INSTALL) if why else None

    def __init__(self, arm: Arm, ctx: BackendContext) -> None:
        super().__init__(arm, ctx)
        self.model: Any = None
        self.tokenizer: Any = None
        self.draft: Any = None
        self.end_bias: Any = None
        self.draft_bias: Any = None
        self.model_path = ""
        self.num_draft = 0
        self._bytes: int | None = None

    def load(self, emit: Emit) -> None:
        import mlx.core as mx
        from mlx_lm import load

        if self.arm.model is None:
            raise ValueError(f"arm {self.arm.name}: the {self.name} backend needs model = ...")
        cell = arm_cell(self.arm.name)
        emit(StatusChanged(cell, Status.LOADING, phase="loading target (mlx_lm.load)", progress=0.2))
        path = models.resolve(self.arm.model)
        self.model_path = str(path)
        mx.reset_peak_memory()
        model, self.tokenizer = load(self.model_path)[:2]
        self.model = MaskedEnds(model)
        self.end_bias = _end_bias(model, end_ids(self.tokenizer._tokenizer))
        if self.opts["draft_model"]:
            emit(StatusChanged(cell, Status.LOADING, phase="loading draft (mlx_lm.load)", progress=0.6))
            draft = load(str(models.resolve(str(self.opts["draft_model"]))))[0]
            # masked like the target, as a logits processor given to mlx-lm would be on both
            self.draft = MaskedEnds(draft)
            self.draft_bias = _end_bias(draft, end_ids(self.tokenizer._tokenizer))
            n_max = self.arm.n_max
            asked = int(self.opts["num_draft_tokens"] or 0)
            if asked and n_max and asked != n_max:
                raise ValueError(f"num_draft_tokens {asked} but n_max {n_max}: give one, or the same")
            self.num_draft = asked or n_max or 2

    def generate(self, request: GenerationRequest, emit: Emit, cancelled: Callable[[], bool]) -> Generation:
        try:
            return self._generate(request, emit, cancelled)
        except (RuntimeError, MemoryError) as exc:
            if isinstance(exc, MemoryError) or any(k in str(exc).lower() for k in _OOM):
                raise EngineOOM(str(exc) or type(exc).__name__) from exc
            raise

    def _generate(self, request: GenerationRequest, emit: Emit, cancelled: Callable[[], bool]) -> Generation:
        import mlx.core as mx
        from mlx_lm.generate import stream_generate
        from mlx_lm.sample_utils import make_sampler

        tok = self.tokenizer
        kwargs = {} if self.opts["enable_thinking"] else {"enable_thinking": False}
        rendered = render_prompt(self.model_path, request.prompt, request.system, request.chat_template, kwargs)
        prompt = list(tok._tokenizer.encode(rendered.text, add_special_tokens=rendered.add_special))
        eos = set(tok.eos_token_ids)
        tok.eos_token_ids = set() if request.ignore_eos else eos
        # ignore_eos masks the end tokens, as the lab's loops do, instead of generating them
        self.model.bias = self.end_bias if request.ignore_eos else None
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
        self._bytes = int(mx.get_active_memory())
        report: dict[str, Any] = {
            "engine": f"mlx-lm {engine_version('mlx-lm')}", "mlx_peak_bytes": int(mx.get_peak_memory()),
            "mlx_active_bytes": self._bytes, **rendered.report(),
        }
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
        gen = cell.finish(len(prompt), report)
        gen.engine_bytes = self._bytes
        return gen

    def engine_bytes(self) -> int | None:
        return self._bytes

    def close(self) -> None:
        self.model = self.tokenizer = self.draft = None
        try:
            import mlx.core as mx

            mx.clear_cache()
        except ImportError:
            pass


def _end_bias(model: Any, ends: list[int]) -> Any:
    """-inf at the end tokens over the target's output width (read from one
    forward: a quantized embedding's shape does not tell it)."""
    import mlx.core as mx

    width = int(model(mx.array([[0]])).shape[-1])
    bias = mx.zeros((width,), dtype=mx.float32)
    keep = [i for i in ends if i < width]
    if keep:
        bias[mx.array(keep)] = -mx.inf
    return bias
