"""z-lab's ``dflash.model_mlx.stream_generate`` as its ``dflash mlx`` command
runs it: ``load`` (mlx-lm's loader) for the target, ``load_draft`` for the
draft checkpoint, the draft quantized at load with ``--draft-bits`` (group
64), greedy or sampled at the run's temperature.

Steps come from the engine's yields: after the first token (prompt
processing) each yield is one step's landed tokens. The engine drafts
``min(block_size, tokens left + 1) - 1`` tokens a step (its loop's rule) and
lands the accepted ones plus the target's; when the budget cuts the last
step short, whether its last token was drafted is not told, and the lab
counts it as the target's. It reports no per-step seconds: a step's seconds
are when its yield reached the lab; draft and verify are not measured."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from lab.api import Backend, BackendContext, EngineOOM, Generation, GenerationRequest, MissingEngine, Option
from lab.base.events import Emit, Status, StatusChanged, arm_cell
from lab.kit import models
from lab.kit.engine_loop import EngineCell, MaskedEnds, end_ids, engine_version, lab_loop
from lab.kit.prompting import render_prompt

if TYPE_CHECKING:
    from lab.base.profile import Arm

# z-lab's package pins tqdm, datasets and requests; its MLX module needs none of them
INSTALL = "pip install --no-deps dflash==0.1.0"
_OOM = ("malloc", "out of memory", "unable to allocate")


class ZlabDFlashBackend(Backend):
    name = "zlab-dflash"
    stack = "mlx"
    description = "z-lab's dflash package (dflash mlx): its loader and DFlash / DFlash 2 loop on MLX"
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
    def needs_model(cls, arm_options: Mapping[str, Any]) -> bool:
        return True

    @classmethod
    def is_speculative(cls, arm_options: Mapping[str, Any], drafter: str | None) -> bool:
        return True

    @classmethod
    def missing_engine(cls, arm_options: Mapping[str, Any]) -> MissingEngine | None:
        from lab.kit.checks import import_failure

        base = import_failure("mlx.core", found=("mlx_lm",))
        if base:
            return MissingEngine("mlx-lm", base, 'pip install -e ".[mlx]"')
        why = import_failure("mlx.core", found=("dflash", "huggingface_hub"))
        return MissingEngine("dflash (z-lab)", why, INSTALL) if why else None

    def __init__(self, arm: Arm, ctx: BackendContext) -> None:
        super().__init__(arm, ctx)
        self.model: Any = None
        self.tokenizer: Any = None
        self.draft: Any = None
        self.end_bias: Any = None
        self.model_path = ""
        self.block_size = 0
        self._bytes: int | None = None

    def load(self, emit: Emit) -> None:
        import mlx.core as mx
        from dflash import model_mlx
        from mlx import nn

        if self.arm.model is None:
            raise ValueError(f"arm {self.arm.name}: the {self.name} backend needs model = ...")
        cell = arm_cell(self.arm.name)
        emit(StatusChanged(cell, Status.LOADING, phase="loading target (dflash.model_mlx.load)", progress=0.2))
        self.model_path = str(models.resolve(self.arm.model))
        mx.reset_peak_memory()
        model, self.tokenizer = model_mlx.load(self.model_path)[:2]
        # z-lab's loop takes no logit bias: ignore_eos masks the end tokens on the target's output
        self.model = MaskedEnds(model)
        self.end_bias = _end_bias(model, end_ids(self.tokenizer._tokenizer))
        emit(StatusChanged(cell, Status.LOADING, phase="loading draft (dflash.model_mlx.load_draft)", progress=0.6))
        self.draft = _load_local_draft(models.resolve(str(self.opts["draft"])))
        if self.opts["draft_bits"]:
            nn.quantize(self.draft, group_size=64, bits=int(self.opts["draft_bits"]))
            mx.eval(self.draft.parameters())
        asked, n_max = int(self.opts["block_size"] or 0), self.arm.n_max
        if asked and n_max and asked != n_max + 1:
            raise ValueError(f"block_size {asked} drafts {asked - 1} tokens, but n_max is {n_max}: give one, or block_size = n_max + 1")
        self.block_size = asked or (n_max + 1 if n_max else int(self.draft.config.block_size))

    def generate(self, request: GenerationRequest, emit: Emit, cancelled: Callable[[], bool]) -> Generation:
        try:
            return self._generate(request, emit, cancelled)
        except (RuntimeError, MemoryError) as exc:
            if isinstance(exc, MemoryError) or any(k in str(exc).lower() for k in _OOM):
                raise EngineOOM(str(exc) or type(exc).__name__) from exc
            raise

    def _generate(self, request: GenerationRequest, emit: Emit, cancelled: Callable[[], bool]) -> Generation:
        import mlx.core as mx
        from dflash.model_mlx import stream_generate

        tok = self.tokenizer
        kwargs = {} if self.opts["enable_thinking"] else {"enable_thinking": False}
        rendered = render_prompt(self.model_path, request.prompt, request.system, request.chat_template, kwargs)
        prompt = list(tok._tokenizer.encode(rendered.text, add_special_tokens=rendered.add_special))
        eos = set(tok.eos_token_ids)
        tok.eos_token_ids = set() if request.ignore_eos else eos
        self.model.bias = self.end_bias if request.ignore_eos else None
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
        self._bytes = int(mx.get_active_memory())
        report: dict[str, Any] = {
            "engine": f"dflash {engine_version('dflash')}", "block_size": self.block_size,
            "draft_bits": int(self.opts["draft_bits"]), "engine_yields": yields,
            "mlx_peak_bytes": int(mx.get_peak_memory()), "mlx_active_bytes": self._bytes, **rendered.report(),
            "lab_loop": lab_loop("mlx-dflash", draft=str(self.opts["draft"]), draft_bits=int(self.opts["draft_bits"])),
            "loop_differences": ["its last step drafts up to the budget's end, one token more than the lab's"],
        }
        if last is not None:
            report |= {"engine_generation_tps": float(last.generation_tps), "engine_prompt_tps": float(last.prompt_tps)}
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
    """-inf at the end tokens over the target's output width."""
    import mlx.core as mx

    width = int(model(mx.array([[0]])).shape[-1])
    bias = mx.zeros((width,), dtype=mx.float32)
    keep = [i for i in ends if i < width]
    if keep:
        bias[mx.array(keep)] = -mx.inf
    return bias


def _load_local_draft(path: Path) -> Any:
    """``load_draft`` takes a hub id and downloads it; a profile names a
    local checkpoint, so its download is pointed at the directory."""
    from dflash import model_mlx

    original = model_mlx.snapshot_download
    model_mlx.snapshot_download = lambda repo_id, **_: str(path)
    try:
        return model_mlx.load_draft(str(path))
    finally:
        model_mlx.snapshot_download = original

