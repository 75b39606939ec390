"""The ``mlx-dflash`` backend: a DFlash or DFlash 2 draft (z-lab checkpoint
format, or a DFlash GGUF as llama.cpp's draft-dflash loads it) drafts blocks
from the target's hidden states; the target verifies each block in one pass.
Its baseline is the ``mlx`` arm on the same model."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping

from lab.api import BackendContext, Generation, GenerationRequest, Option
from lab.base.events import Emit
from lab.kit import models
from lab_mlx.backend import MlxSession

if TYPE_CHECKING:
    from lab.api import EngineCommand
    from lab.base.footprint import MemoryNeeds
    from lab.base.profile import Arm, RunSettings
    from lab_mlx.dflash_model import DFlashDraft
    from lab_mlx.target import MlxTarget


class MlxDFlashBackend(MlxSession):
    name = "mlx-dflash"
    description = "MLX target + DFlash / DFlash 2 block draft (z-lab checkpoints or llama.cpp DFlash GGUF); draft and verify timed apart"
    options = MlxSession.options + (
        Option("draft", str, None,
               "draft checkpoint directory (config.json with dflash_config + safetensors), a DFlash .gguf "
               "(llama.cpp's draft-dflash file), or a built-in model (tiny:..., synthetic:...-dflash)",
               required=True, model_ref=True),
        Option("block_size", int, 0, "tokens per block, the last target token included: drafts block_size - 1 = n_max (0: n_max + 1 if the arm sets n_max, else the draft's own)",
               min=0, max=1025),
        Option("draft_bits", int, 0, "quantize the draft's layers at load (0: keep as stored)", choices=(0, 2, 3, 4, 6, 8)),
        Option("draft_group_size", int, 64, "quantization group size for draft_bits", choices=(32, 64, 128)),
        Option(
            "timing", str, "split",
            "split: evaluate the draft before verifying, so draft and verify seconds are measured apart; "
            "fused: queue verify on the unevaluated draft as z-lab's loop does (only step seconds)",
            choices=("split", "fused"),
        ),
    )

    def __init__(self, arm: Arm, ctx: BackendContext) -> None:
        super().__init__(arm, ctx)
        self.draft: DFlashDraft | None = None
        self.target: MlxTarget | None = None
        self.block_size = 0

    @classmethod
    def is_speculative(cls, arm_options: Mapping[str, Any], drafter: str | None) -> bool:
        return True

    @classmethod
    def sets_acceptance(cls, arm_options: Mapping[str, Any]) -> bool:
        return True  # its loop decides with lab.kit.speculative.acceptor

    @classmethod
    def engine_command(cls, arm: Arm, run: RunSettings) -> EngineCommand | None:
        """z-lab's ``dflash generate mlx`` on the same files (:mod:`lab_mlx.engine_line`)."""
        from lab.api import with_defaults
        from lab_mlx.engine_line import dflash_command

        return dflash_command(arm, run, with_defaults(cls.options, arm.options))

    @classmethod
    def memory_needs(cls, arm: Arm, run: RunSettings) -> MemoryNeeds | None:
        """The target as the mlx backend holds it, verifying a block a step,
        and the DFlash draft (quantized at load to draft_bits) with its own
        cache of the context's target features."""
        import platform

        from lab.base.footprint import MLX, MemoryNeeds, ModelLoad

        if arm.model is None or not arm.options.get("draft"):
            return None
        block = int(arm.options.get("block_size") or 0) or (arm.n_max or 15) + 1
        rows = min(512, run.n_ctx)
        loads = (
            ModelLoad("target", arm.model, run.n_ctx, n_ubatch=rows, n_outputs=512, n_verify=block),
            ModelLoad("draft", str(arm.options["draft"]), run.n_ctx, n_ubatch=rows, n_outputs=block, n_verify=block,
                      weight_bits=int(arm.options.get("draft_bits") or 0),
                      group_size=int(arm.options.get("draft_group_size") or 64)),
        )
        apple = platform.system() == "Darwin" and platform.machine() == "arm64"
        return MemoryNeeds(MLX, loads, accelerated=apple, process_bytes=430 << 20,
                          process_before_load=413 << 20)

    def pauses_between_steps(self) -> bool:
        return True  # each step's tokens are read back before the next check

    def _load_on_engine(self, path: Any, emit: Emit) -> None:
        from lab_mlx.dflash_model import load_draft
        from lab_mlx.gguf_dflash import load_gguf_draft
        from lab_mlx.target import MlxTarget, install_capture

        super()._load_on_engine(path, emit)
        assert self.loaded is not None
        opts = self.arm.options
        draft_path = models.resolve(str(opts["draft"]))
        bits = int(opts.get("draft_bits", 0) or 0)
        # a file is llama.cpp's DFlash GGUF, a directory z-lab's checkpoint
        load = load_gguf_draft if draft_path.is_file() and draft_path.suffix == ".gguf" else load_draft
        self.draft = load(draft_path, bits or None, int(opts.get("draft_group_size", 64)))
        spec = self.draft.spec
        if spec.vocab_size != self.loaded.vocab.n_vocab:
            raise ValueError(f"draft {draft_path} has vocab_size {spec.vocab_size}, the target {self.loaded.vocab.n_vocab}")
        # n_max (tokens drafted per step) and block_size describe the same
        # thing; n_max is what the results' max yield is computed from.
        block_opt = int(opts.get("block_size", 0) or 0)
        n_max = self.arm.n_max
        if block_opt and n_max and block_opt != n_max + 1:
            raise ValueError(f"block_size {block_opt} drafts {block_opt - 1} tokens, but n_max is {n_max}: give one, or block_size = n_max + 1")
        self.block_size = block_opt or (n_max + 1 if n_max else spec.block_size)
        if self.block_size < 2:
            raise ValueError("block_size must be at least 2 (the last target token plus one drafted)")
        if spec.target_layer_inputs and self.block_size > spec.block_size:
            # llama.cpp would clamp n_max to the trained block: say so rather than run another arm
            raise ValueError(f"block_size {self.block_size} exceeds the DFlash GGUF's trained block of {spec.block_size} "
                             f"(llama.cpp's draft-dflash clamps n_max to {spec.block_size - 1})")
        self.draft.bind(self.loaded.model)
        # A GGUF's target_layers count layer inputs, as llama.cpp extracts them.
        sink = install_capture(self.loaded.model, spec.target_layer_ids, inputs=spec.target_layer_inputs)
        self.target = MlxTarget(self.loaded.model, self.loaded.vocab, self.ctx.run.n_ctx, sink)

    def generate(self, request: GenerationRequest, emit: Emit, cancelled: Callable[[], bool]) -> Generation:
        return self.call(lambda: self._generate(request, emit, cancelled))

    def _generate(self, request: GenerationRequest, emit: Emit, cancelled: Callable[[], bool]) -> Generation:
        from lab_mlx.dflash_loop import generate_dflash

        assert self.target is not None and self.draft is not None
        self.target.set_sampling(request.temperature, request.seed, request.ignore_eos)
        ids = self.prompt_ids(request)
        split = self.arm.options.get("timing", "split") == "split"
        gen = generate_dflash(self.target, self.draft, ids, request, emit, cancelled, self.block_size, self.stats, split)
        gen.engine_report["timing"] = "split" if split else "fused"
        gen.engine_report["block_size"] = self.block_size
        gen.engine_report["draft_version"] = self.draft.spec.version
        gen.engine_report["draft_format"] = "gguf" if self.draft.spec.target_layer_inputs else "checkpoint"
        return self._finish(gen, self.target)

    def _release(self) -> None:
        self.target = None
        self.draft = None

    def report(self) -> dict[str, Any]:
        out = super().report()
        out["block_size"] = self.block_size
        return out
