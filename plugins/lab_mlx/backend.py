"""The ``mlx`` backend: autoregressive baseline and the lab's speculative
loop (lab.kit.speculative) for any drafter plugin, over an MLX target."""

from __future__ import annotations

import platform
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, Sequence

from lab.api import (
    Backend,
    BackendContext,
    Drafting,
    DraftModelHost,
    EngineOOM,
    Generation,
    GenerationRequest,
    MissingEngine,
    Option,
    Probing,
)
from lab.base.events import Emit
from lab.kit.loading import resolve_target
from lab.kit.prompting import OFF, RenderedPrompt, render_prompt
from lab.kit.speculative import LoopStats, generate

if TYPE_CHECKING:
    from lab.api import Drafter, DrafterContext, EngineCommand
    from lab.base.footprint import MemoryNeeds
    from lab.base.profile import Arm, RunSettings
    from lab_mlx.engine import EngineThread
    from lab_mlx.loader import LoadedModel
    from lab_mlx.target import MlxTarget


_OOM_MARKERS = ("malloc", "out of memory", "unable to allocate", "insufficient memory")


class MlxSession(Backend, Probing):
    """What both MLX backends share: one engine thread that owns every MLX
    call, loading, wired limit, memory figures."""

    stack = "mlx"
    native_preload = ("mlx.core", "mlx_lm.utils")
    # the synchronous one-row pass a probe timed beside the pipelined token it prices T(1) in
    _one_row_pass_s: float | None = None
    options: ClassVar[tuple[Option, ...]] = (
        Option("enable_thinking", bool, True, "passed to the chat template (Qwen3-style thinking switch; the write-ups turned it off)"),
    )

    @classmethod
    def needs_model(cls, arm_options: Mapping[str, Any]) -> bool:
        return True  # lab check refuses an arm without one

    @classmethod
    def missing_engine(cls, arm_options: Mapping[str, Any]) -> MissingEngine | None:
        from lab.kit import mlx_platform
        from lab.kit.checks import import_failure

        gone = mlx_platform.unavailable()
        if gone:
            return MissingEngine("mlx", gone, "")
        # mlx_lm is only looked up: importing it brings transformers in (seconds)
        why = import_failure("mlx.core", found=("mlx_lm",))
        return MissingEngine("mlx", why, mlx_platform.install_line()) if why else None

    @classmethod
    def busy_cores(cls, arm_options: Mapping[str, Any], threads: int) -> int:
        # On Apple silicon MLX computes on the GPU and its thread waits;
        # elsewhere it runs on the CPU's cores.
        if platform.system() == "Darwin" and platform.machine() == "arm64":
            return 1
        return super().busy_cores(arm_options, threads)

    def __init__(self, arm: Arm, ctx: BackendContext) -> None:
        super().__init__(arm, ctx)
        self.engine: EngineThread | None = None
        self.loaded: LoadedModel | None = None
        self._old_wired: int | None = None
        self.stats = LoopStats()
        # the model file the prompt's template comes from, and the last prompt sent
        self.model_path = ""
        self.rendered = RenderedPrompt("", OFF)

    def load(self, emit: Emit) -> None:
        from lab_mlx.engine import EngineThread

        path = resolve_target(self.arm, self.name, emit)
        self.model_path = str(path)
        self.engine = EngineThread(self.arm.name)
        self.call(lambda: self._load_on_engine(path, emit))

    def _load_on_engine(self, path: Any, emit: Emit) -> None:
        import mlx.core as mx

        from lab_mlx.engine import set_wired_limit
        from lab_mlx.loader import load_target

        # MLX's peak is the process's: arms run one after another in it, so
        # each arm's peak starts at its own load, not at an earlier arm's
        mx.reset_peak_memory()
        self._old_wired = set_wired_limit()
        self.loaded = load_target(path, self._keeps_nextn(path))

    def _keeps_nextn(self, path: Any) -> bool:
        """Whether the target's read keeps its GGUF's nextn blocks (a head
        taken from the target's own file)."""
        return False

    def call(self, fn: Callable[[], Any]) -> Any:
        assert self.engine is not None, "load() first"
        try:
            return self.engine.call(fn)
        except (RuntimeError, MemoryError) as exc:
            # MLX reports allocation failures as RuntimeError ("[metal::malloc]
            # ...", "out of memory"): those are results (status oom), not bugs.
            text = str(exc)
            if isinstance(exc, MemoryError) or any(k in text.lower() for k in _OOM_MARKERS):
                raise EngineOOM(text or type(exc).__name__) from exc
            raise

    def vocab_size(self) -> int:
        assert self.loaded is not None
        return self.loaded.vocab.n_vocab

    def prompt_ids(self, request: GenerationRequest) -> list[int]:
        """The ids of the prompt the lab renders for every stack (see
        lab.kit.prompting), from the model file this arm loaded; ``self.rendered``
        keeps its text for the row."""
        assert self.loaded is not None
        # Only a non-default switch goes to the template: most templates
        # ignore unknown variables, but some reject them.
        kwargs = {} if self.arm.options.get("enable_thinking", True) else {"enable_thinking": False}
        self.rendered = render_prompt(self.model_path, request.prompt, request.system, request.chat_template, kwargs)
        return self.loaded.vocab.encode(self.rendered.text, add_special=self.rendered.add_special)

    def _finish(self, gen: Generation, target: MlxTarget) -> Generation:
        from lab_mlx.engine import memory

        mem = memory()
        gen.engine_bytes = mem["mlx_active_bytes"]
        gen.engine_report.update(mem)
        gen.engine_report["rollback_forwards"] = target.rollback_forwards
        # the greedy tokens, for an engine's own loop set beside this one (lab.render.engines)
        gen.engine_report["output_ids"] = list(gen.ids)
        gen.engine_report.update(self.rendered.report())
        return gen

    def engine_bytes(self) -> int | None:
        if self.engine is None or self.loaded is None:
            return None
        from lab_mlx.engine import memory

        return self.call(lambda: memory()["mlx_active_bytes"])

    def close(self) -> None:
        if self.engine is None:
            return
        from lab_mlx.engine import restore_wired_limit

        def release() -> None:
            import mlx.core as mx

            self.loaded = None
            self._release()
            restore_wired_limit(self._old_wired)
            mx.clear_cache()

        try:
            if self.engine.started:
                self.engine.call(release)
        finally:
            self.engine.close()
            self.engine = None

    def _release(self) -> None:
        """Drop backend-specific engine objects (on the engine thread)."""

    def report(self) -> dict[str, Any]:
        return {"loop_overhead_s": self.stats.overhead_s(), "steps": self.stats.steps}

    # Verify cost (``lab probe``): one target pass over w tokens, timed.
    probe_methods: ClassVar[tuple[str, ...]] = ("decode",)

    def measure_verify_cost(self, widths: Sequence[int], method: str | None = None) -> list[float]:
        if method not in (None, "decode"):
            raise ValueError(f"unknown probe method {method!r}; use decode")
        if self.loaded is None:
            raise RuntimeError("load() the backend before measuring by decode")
        loaded = self.loaded

        pipelined = self.ctx.run.temperature <= 0 and 1 in widths

        def run() -> list[float]:
            from lab_mlx.probe import decode_pass_seconds, pipelined_token_seconds
            from lab_mlx.target import MlxTarget

            target = MlxTarget(loaded.model, loaded.vocab, self.ctx.run.n_ctx)
            seconds = decode_pass_seconds(target, widths)
            if pipelined:
                # T(1) as the greedy baseline decodes it, the one-row pass kept in the notes
                self._one_row_pass_s = seconds[list(widths).index(1)]
                seconds[list(widths).index(1)] = pipelined_token_seconds(target)
            return seconds

        return list(self.call(run))

    def probe_notes(self) -> dict[str, Any]:
        from lab_mlx.probe import INNER_PASSES, PIPELINED_TOKENS, PREFIX_TOKENS

        notes = {"prefix_tokens": PREFIX_TOKENS, "inner_passes": INNER_PASSES, "order": "consecutive",
                 "device": self.call(_device_name)}
        one_row = self._one_row_pass_s
        if one_row is not None:
            notes |= {"one_row": f"the greedy baseline's token, pipelined ({PIPELINED_TOKENS} a timed run)",
                      "one_row_pass_s": one_row}
        return notes


def _device_name() -> str:
    import mlx.core as mx

    return str(mx.default_device())


class MlxBackend(MlxSession, Drafting, DraftModelHost):
    name = "mlx"
    description = "MLX (mlx-lm models, or GGUF Q4_0/Q4_1/Q8_0 through mx.load); runs drafter plugins"
    accepts_drafters = True

    @classmethod
    def sets_acceptance(cls, arm_options: Mapping[str, Any]) -> bool:
        return True  # the lab's own loop decides (lab.kit.speculative.acceptor)

    @classmethod
    def engine_command(cls, arm: Arm, run: RunSettings) -> EngineCommand | None:
        """mlx-lm's ``mlx_lm.generate``, plain or with the draft-model
        drafter's model (:mod:`lab_mlx.engine_line`)."""
        from lab.api import with_defaults
        from lab_mlx.engine_line import mlx_command

        return mlx_command(arm, run, with_defaults(cls.options, arm.options))

    @classmethod
    def memory_needs(cls, arm: Arm, run: RunSettings) -> MemoryNeeds | None:
        """The target as MlxTarget holds it (a KV cache growing to n_ctx,
        prompts in passes of 512 rows with every row's logits) and a draft
        model a drafter runs here, held the same way."""
        from lab.base.footprint import MLX, MemoryNeeds, ModelLoad

        if arm.model is None:
            return None
        width = (arm.n_max or 0) + 1
        loads = [ModelLoad("target", arm.model, run.n_ctx, n_ubatch=min(512, run.n_ctx), n_outputs=512, n_verify=width)]
        draft = arm.drafter_options.get("model") if arm.drafter is not None else None
        if isinstance(draft, str):
            loads.append(ModelLoad("draft", draft, int(arm.drafter_options.get("n_ctx") or 0) or run.n_ctx,
                                   n_ubatch=min(512, run.n_ctx), n_outputs=512))
        # MLX computes on the GPU on Apple silicon, on the CPU elsewhere (mlx[cpu]);
        # the process: this arm's own, MLX and mlx-lm (with transformers) imported, its RSS on Linux x86-64
        apple = platform.system() == "Darwin" and platform.machine() == "arm64"
        return MemoryNeeds(MLX, tuple(loads), accelerated=apple, process_bytes=430 << 20,
                          process_before_load=413 << 20)

    def __init__(self, arm: Arm, ctx: BackendContext) -> None:
        super().__init__(arm, ctx)
        self.drafter: Drafter | None = None
        self.target: MlxTarget | None = None

    def attach_drafter(self, drafter: Drafter) -> None:
        self.drafter = drafter

    def draft_model(self, options: Mapping[str, Any], ctx: DrafterContext) -> Drafter:
        from lab_mlx.draft_model import MlxDraftModel

        assert self.engine is not None, "load() first"
        return MlxDraftModel(options, ctx, self.engine)

    def generate(self, request: GenerationRequest, emit: Emit, cancelled: Callable[[], bool]) -> Generation:
        return self.call(lambda: self._generate(request, emit, cancelled))

    def _generate(self, request: GenerationRequest, emit: Emit, cancelled: Callable[[], bool]) -> Generation:
        from lab_mlx.target import MlxTarget

        assert self.loaded is not None
        if self.target is None:
            self.target = MlxTarget(self.loaded.model, self.loaded.vocab, self.ctx.run.n_ctx)
        target = self.target
        target.set_sampling(request.temperature, request.seed, request.ignore_eos)
        ids = self.prompt_ids(request)
        if self.drafter is None and request.temperature <= 0:
            from lab_mlx.baseline import generate_greedy_pipelined

            gen = generate_greedy_pipelined(target, ids, request, emit, cancelled)
        else:
            gen = generate(target, ids, request, emit, cancelled, self.drafter, self.stats)
        return self._finish(gen, target)

    def pauses_between_steps(self) -> bool:
        # The greedy baseline keeps the next token in flight (async_eval)
        # while it checks; the lab's loop holds nothing between steps.
        return self.drafter is not None or self.ctx.run.temperature > 0

    def _release(self) -> None:
        self.target = None
