"""The ``mlx-mtp`` backend: an MLX target drafts with its MTP (nextn) head,
read from a GGUF or safetensors file with GGUF tensor names and fed the
target's hidden state as llama.cpp feeds it; the target verifies each
step in one pass. Greedy or set acceptance only, and the head keeps no KV
cache of its own yet."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from lab.api import BackendContext, Cancelled, EngineCommand, Generation, GenerationRequest, Option
from lab.base.events import ALL_MEASURED, Emit, StepEvent, now
from lab.kit import models
from lab.kit.speculative import LoopStats, OutputStream, acceptor, check_room, plain_token
from lab_mlx.backend import MlxSession

if TYPE_CHECKING:
    from lab.base.footprint import MemoryNeeds
    from lab.base.profile import Arm, RunSettings
    from lab_mlx.target import MlxTarget


class MlxMtpBackend(MlxSession):
    name = "mlx-mtp"
    description = "MLX target + its MTP (nextn) head as the drafter; draft and verify timed apart"
    options = MlxSession.options + (
        Option("mtp", str, None, "file holding the nextn block (GGUF or safetensors, GGUF tensor names blk.N.nextn.*)",
               required=True, model_ref=True),
        Option("mtp_layer", int, -1, "block index N of the nextn tensors (-1: the highest found)", min=-1),
    )

    def __init__(self, arm: Arm, ctx: BackendContext) -> None:
        super().__init__(arm, ctx)
        self.head: Any = None
        self.feed: Callable[[Any], Any] | None = None  # target hidden state -> the head's h
        self.target: MlxTarget | None = None

    @classmethod
    def is_speculative(cls, arm_options: Mapping[str, Any], drafter: str | None) -> bool:
        return True

    @classmethod
    def sets_acceptance(cls, arm_options: Mapping[str, Any]) -> bool:
        return True

    @classmethod
    def engine_command(cls, arm: Arm, run: RunSettings) -> EngineCommand | None:
        from lab_mlx.engine_line import MTP_NONE

        return EngineCommand((), (MTP_NONE,))

    @classmethod
    def memory_needs(cls, arm: Arm, run: RunSettings) -> MemoryNeeds | None:
        """The target as the mlx backend holds it and its MTP head: read from
        the target's own file (its nextn blocks) or from a file of its own,
        with a cache of one layer."""
        import platform

        from lab.base.footprint import MLX, MemoryNeeds, ModelLoad

        mtp = arm.options.get("mtp")
        if arm.model is None or not mtp:
            return None
        rows = min(512, run.n_ctx)
        width = (arm.n_max or 1) + 1
        loads = (
            ModelLoad("target", arm.model, run.n_ctx, n_ubatch=rows, n_outputs=512, n_verify=width),
            ModelLoad("MTP head", str(mtp), run.n_ctx, n_ubatch=rows, n_outputs=1, nextn_only=True,
                      shares_weights=str(mtp) == arm.model),
        )
        apple = platform.system() == "Darwin" and platform.machine() == "arm64"
        return MemoryNeeds(MLX, loads, accelerated=apple, process_bytes=430 << 20,
                          process_before_load=413 << 20)

    def pauses_between_steps(self) -> bool:
        return True

    def _mtp_path(self) -> Path:
        mtp_path = models.resolve(str(self.arm.options["mtp"]))
        return mtp_path / "mtp.safetensors" if mtp_path.is_dir() else mtp_path

    def _keeps_nextn(self, path: Any) -> bool:
        return self._mtp_path().resolve() == Path(path).resolve()

    def _load_on_engine(self, path: Any, emit: Emit) -> None:
        import mlx.core as mx

        from lab.kit.model_files import check_model
        from lab_mlx.mtp_model import load_head, load_qwen35_head
        from lab_mlx.target import MlxTarget, _layers, install_capture

        super()._load_on_engine(path, emit)
        assert self.loaded is not None
        mtp_path = self._mtp_path()
        # the head in the target's own GGUF: its tensors from the target's read, not a second one
        if not self.loaded.nextn:
            check_model(mtp_path)
        weights: Any = self.loaded.nextn or mx.load(str(mtp_path))
        self.loaded.nextn = {}  # the head keeps what it takes
        layer = int(self.arm.options.get("mtp_layer", -1))
        if layer < 0:
            found = [int(k.split(".")[1]) for k in weights if k.startswith("blk.") and ".nextn." in k]
            if not found:
                raise ValueError(f"{mtp_path}: no nextn tensors (blk.N.nextn.*)")
            layer = max(found)
        if self.loaded.config.get("model_type") == "qwen3_5":
            model = self.loaded.model
            self.head = load_qwen35_head(model.language_model.args, weights, layer)
            self.feed = model.model.norm
        else:
            self.head = load_head(self._llama_args(), weights, layer)
        sink = install_capture(self.loaded.model, [len(_layers(self.loaded.model)) - 1])
        self.target = MlxTarget(self.loaded.model, self.loaded.vocab, self.ctx.run.n_ctx, sink)

    def _llama_args(self) -> Any:
        from mlx_lm.models.llama import ModelArgs

        assert self.loaded is not None
        a = self.loaded.model.args
        return ModelArgs(
            model_type="llama", hidden_size=a.hidden_size, num_hidden_layers=1, intermediate_size=a.intermediate_size,
            num_attention_heads=a.num_attention_heads, rms_norm_eps=a.rms_norm_eps, vocab_size=a.vocab_size,
            num_key_value_heads=a.num_key_value_heads, head_dim=getattr(a, "head_dim", None),
            rope_theta=getattr(a, "rope_theta", 10000.0),
        )

    def generate(self, request: GenerationRequest, emit: Emit, cancelled: Callable[[], bool]) -> Generation:
        return self.call(lambda: self._generate(request, emit, cancelled))

    def _generate(self, req: GenerationRequest, emit: Emit, cancelled: Callable[[], bool]) -> Generation:
        target = self.target
        assert target is not None and self.head is not None
        if req.temperature > 0 and req.acceptance is None:
            raise ValueError("mlx-mtp drafts greedily: sampling needs set acceptance for now")
        target.set_sampling(req.temperature, req.seed, req.ignore_eos)
        model = self.loaded.model  # type: ignore[union-attr]
        inner = model.model
        embed = inner.embed_tokens
        # qwen3_5 keeps its LM head on the wrapped language model.
        lm_head = getattr(getattr(model, "language_model", model), "lm_head", None) or embed.as_linear
        gen = generate_mtp(target, self.head, embed, lm_head, self.prompt_ids(req), req, emit, cancelled,
                           self.arm.n_max or 2, self.stats, self.feed)
        return self._finish(gen, target)

    def _release(self) -> None:
        self.target = None
        self.head = None
        self.feed = None


def generate_mtp(target: MlxTarget, head: Any, embed: Any, lm_head: Any, ids: list[int], req: GenerationRequest,
                 emit: Emit, cancelled: Callable[[], bool], n_max: int, stats: LoopStats | None = None,
                 feed: Callable[[Any], Any] | None = None) -> Generation:
    """One cell: each step the head drafts n_max tokens (fewer at the end of
    the budget) and the target verifies them in one pass. ``feed`` maps the
    target's captured hidden states to the head's h (default: as they are)."""
    from lab_mlx.mtp_model import draft

    def hidden(rows: slice) -> Any:
        h = target.hidden[:, rows]
        return feed(h) if feed is not None else h

    stats = stats if stats is not None else LoopStats()
    start = stats.mark()
    out = OutputStream(target, req, emit)
    accept = acceptor(req)
    t0 = now()
    target.reset()
    check_room(target, len(ids) + 1)
    target.decode(ids, all_logits=False)
    h = hidden(slice(-1, None))
    pending = target.pick(-1)
    t_prompt = now()
    out.land([pending], from_draft=False)
    step = 0
    while len(out.ids) < req.max_tokens:
        if cancelled():
            raise Cancelled()
        t_a = now()
        k = min(n_max, req.max_tokens - len(out.ids) - 1, target.n_ctx - target.n_past - 1)
        if k <= 0:
            pending, h = plain_token(target, out, stats, pending, t_a, lambda: hidden(slice(-1, None)))
            continue
        base = target.n_past
        drafted = draft(head, embed, lm_head, pending, h, k)
        t_b = now()
        target.decode([pending, *drafted], all_logits=True)
        t_c = now()
        accepted, correction = accept(target, drafted, None)
        h = hidden(slice(accepted, accepted + 1))
        target.truncate(base + 1 + accepted)
        t_d = now()
        landed = out.land_step(drafted, accepted, correction)
        pending = correction
        stats.steps += 1
        stats.draft_s += t_b - t_a
        stats.engine_s += t_c - t_b
        emit(StepEvent(req.cell, step, drafted=len(drafted), accepted=accepted, landed=len(landed),
                       draft_s=t_b - t_a, verify_s=t_d - t_b, step_s=t_d - t_a, clocks=ALL_MEASURED))
        step += 1
        stats.loop_s += now() - t_a
    gen = Generation(text=out.text(), ids=out.ids, prompt_tokens=len(ids), prompt_s=t_prompt - t0,
                     gen_s=now() - t_prompt, engine_report={**stats.cell_report(start), "mtp_layer": "head"})
    return gen
