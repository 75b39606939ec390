"""For a backend that runs an engine's own generation loop instead of the
lab's (mlx-lm's, z-lab's dflash, dflash-mlx): turning what that loop yields
into the lab's token and step events, and the backend class they share.

Counts and seconds come only from what the engine yields or reports; where it
gives no step seconds, arrival times at the lab stand in (:data:`Clock.CLIENT`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from lab.api import Backend, BackendContext, Cancelled, EngineOOM, Generation, GenerationRequest, MissingEngine
from lab.base.events import Clock, Emit, Status, StatusChanged, StepClocks, StepEvent, TokenEvent, arm_cell, now
from lab.kit import models
from lab.kit.prompting import RenderedPrompt, render_prompt

if TYPE_CHECKING:
    from lab.base.profile import Arm

# A step timed only by when its tokens reached the lab.
CLIENT_STEP = StepClocks(draft=Clock.NONE, verify=Clock.NONE, step=Clock.CLIENT)
# A step whose draft and verify seconds the engine reports itself.
ENGINE_SPLIT = StepClocks(draft=Clock.ENGINE, verify=Clock.ENGINE, step=Clock.ENGINE)


# Token texts that end a generation; with ``ignore_eos`` the lab's loops mask
# them (as llama.cpp's ignore_eos does), so an engine arm masks the same ids.
END_TEXTS = frozenset({
    "</s>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>",
    "<end_of_turn>", "<EOT>", "<|end_of_text|>", "<\uff5cend\u2581of\u2581sentence\uff5c>",
})


def end_ids(hf_tokenizer: Any) -> list[int]:
    """The ids of a Hugging Face tokenizer's end-of-generation tokens: its
    EOS and every token whose text is in :data:`END_TEXTS`."""
    vocab = hf_tokenizer.get_vocab()
    ids = {int(vocab[t]) for t in END_TEXTS if t in vocab}
    if hf_tokenizer.eos_token_id is not None:
        ids.add(int(hf_tokenizer.eos_token_id))
    return sorted(ids)


class MaskedEnds:
    """A model whose logits come out with ``bias`` added (None: as they
    are), for an engine whose loop takes no logit bias."""

    def __init__(self, model: Any) -> None:
        self.__dict__["_inner"] = model
        self.__dict__["bias"] = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        out = self._inner(*args, **kwargs)
        return out if self.bias is None else out + self.bias

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_inner"], name)


def lab_loop(backend: str, drafter: str | None = None, **options: Any) -> dict[str, Any]:
    """Which of the lab's own arms runs an engine arm's algorithm on the same
    files, as :mod:`lab.render.engines` pairs them."""
    return {"backend": backend, "drafter": drafter, "options": options}


def engine_version(dist: str) -> str:
    """The installed version of an engine's distribution, "?" if unknown."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


@dataclass
class EngineCell:
    """One cell of an engine's own loop as the lab records it: the tokens
    it landed (in events, text as the engine's detokenizer made it), its
    steps, and the clocks the lab keeps around the engine's stream."""

    req: GenerationRequest
    emit: Emit
    ids: list[int] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    t0: float = field(default_factory=now)
    t_first: float | None = None
    t_last: float | None = None

    def land(self, ids: Sequence[int], text: str, from_draft: bool) -> None:
        """Tokens the engine yielded; the first landing ends prompt
        processing, as in the lab's loops. No ids: text the engine's
        detokenizer held back until the end."""
        t = now()
        if self.t_first is None and ids:
            self.t_first = t
        self.t_last = t
        self.ids.extend(int(i) for i in ids)
        self.parts.append(text)
        self.emit(TokenEvent(self.req.cell, text, tuple(int(i) for i in ids), from_draft, t))

    def step(self, drafted: int, accepted: int, landed: int, step_s: float,
             draft_s: float | None = None, verify_s: float | None = None) -> None:
        clocks = CLIENT_STEP if draft_s is None and verify_s is None else ENGINE_SPLIT
        self.emit(StepEvent(self.req.cell, self.steps, drafted=drafted, accepted=accepted, landed=landed,
                            draft_s=draft_s, verify_s=verify_s, step_s=step_s, clocks=clocks))
        self.steps += 1
        self.drafted += drafted
        self.accepted += accepted

    def since_last(self) -> float:
        """Seconds from the previous landing (or the first token) to now:
        a step's seconds as its tokens reached the lab."""
        return now() - (self.t_last if self.t_last is not None else self.t0)

    @staticmethod
    def check(cancelled: Any) -> None:
        if cancelled():
            raise Cancelled()

    def finish(self, prompt_tokens: int, report: dict[str, Any]) -> Generation:
        """The cell's summary; ``report`` should carry ``lab_loop`` (see
        :func:`lab_loop`) and ``loop_differences`` (how the engine's loop
        differs from the lab's, in words) for the report's engines section."""
        t_end = now()
        report = {**report, "output_ids": list(self.ids)}
        t_first = self.t_first if self.t_first is not None else t_end
        return Generation(
            text="".join(self.parts), ids=list(self.ids), prompt_tokens=prompt_tokens,
            prompt_s=t_first - self.t0, gen_s=t_end - t_first, engine_report=report,
        )


# an MLX allocation failure arrives as a RuntimeError with one of these in its text
_OOM = ("malloc", "out of memory", "unable to allocate")


class EngineBackend(Backend):
    """What the MLX engine backends share: model needed, speculative unless
    overridden, allocation failure as :class:`EngineOOM`, MLX memory reported
    and freed. Subclasses give ``load`` and ``_generate``."""

    stack = "mlx"
    native_preload = ("mlx.core", "mlx_lm.utils")
    # (engine, modules looked up but not imported, install command), checked in order; mlx.core is imported
    engine_checks: tuple[tuple[str, tuple[str, ...], str], ...] = ()

    @classmethod
    def missing_engine(cls, arm_options: Mapping[str, Any]) -> MissingEngine | None:
        from lab.kit import mlx_platform
        from lab.kit.checks import import_failure

        gone = mlx_platform.unavailable()
        if gone:
            return MissingEngine("mlx", gone, "")
        for engine, found, install in cls.engine_checks:
            why = import_failure("mlx.core", found=found)
            if why:
                return MissingEngine(engine, why, install)
        return None

    @classmethod
    def needs_model(cls, arm_options: Mapping[str, Any]) -> bool:
        return True

    @classmethod
    def is_speculative(cls, arm_options: Mapping[str, Any], drafter: str | None) -> bool:
        return True

    def __init__(self, arm: Arm, ctx: BackendContext) -> None:
        super().__init__(arm, ctx)
        self.model_path = ""
        self.model: Any = None
        self.tokenizer: Any = None
        self.end_bias: Any = None
        self._bytes: int | None = None

    def _loading(self, emit: Emit, phase: str, progress: float) -> None:
        emit(StatusChanged(arm_cell(self.arm.name), Status.LOADING, phase=phase, progress=progress))

    def _resolve_target(self) -> str:
        if self.arm.model is None:
            raise ValueError(f"arm {self.arm.name}: the {self.name} backend needs model = ...")
        self.model_path = str(models.resolve(self.arm.model))
        return self.model_path

    def _load_target(self, emit: Emit, loader: Callable[[str], Any], phase: str) -> Any:
        """The arm's model and tokenizer through an mlx-lm style ``loader``,
        the model wrapped in :class:`MaskedEnds` (the engine's loop takes no
        logit bias); returns the bare model."""
        import mlx.core as mx

        self._loading(emit, phase, 0.2)
        self._resolve_target()
        mx.reset_peak_memory()
        model, self.tokenizer = loader(self.model_path)[:2]
        self.model = MaskedEnds(model)
        self.end_bias = end_bias(model, end_ids(self.tokenizer._tokenizer))  # noqa: SLF001 - mlx-lm's TokenizerWrapper keeps the Hugging Face tokenizer there only
        return model

    def _ignore_eos(self, request: GenerationRequest) -> set[int]:
        """With ``ignore_eos`` no token stops the tokenizer and the target's
        end logits are masked; returns the EOS ids to put back after."""
        eos = set(self.tokenizer.eos_token_ids)
        self.tokenizer.eos_token_ids = set() if request.ignore_eos else eos
        self.model.bias = self.end_bias if request.ignore_eos else None
        return eos

    def _block_size(self, default: int) -> int:
        """The ``block_size`` option (the last target token included), agreed
        with the arm's n_max, or n_max + 1, or ``default``."""
        asked, n_max = int(self.opts["block_size"] or 0), self.arm.n_max
        if asked and n_max and asked != n_max + 1:
            raise ValueError(f"block_size {asked} drafts {asked - 1} tokens, but n_max is {n_max}: give one, "
                             "or block_size = n_max + 1")
        return asked or (n_max + 1 if n_max else default)

    def _prompt(self, request: GenerationRequest, hf_tokenizer: Any) -> tuple[RenderedPrompt, list[int]]:
        kwargs = {} if self.opts["enable_thinking"] else {"enable_thinking": False}
        rendered = render_prompt(self.model_path, request.prompt, request.system, request.chat_template, kwargs)
        return rendered, list(hf_tokenizer.encode(rendered.text, add_special_tokens=rendered.add_special))

    def generate(self, request: GenerationRequest, emit: Emit, cancelled: Callable[[], bool]) -> Generation:
        try:
            return self._generate(request, emit, cancelled)
        except (RuntimeError, MemoryError) as exc:
            if isinstance(exc, MemoryError) or any(k in str(exc).lower() for k in _OOM):
                raise EngineOOM(str(exc) or type(exc).__name__) from exc
            raise

    def _generate(self, request: GenerationRequest, emit: Emit, cancelled: Callable[[], bool]) -> Generation:
        raise NotImplementedError

    def _memory(self) -> dict[str, int]:
        """The MLX peak and active bytes for the report; active is the arm's engine_bytes."""
        import mlx.core as mx

        self._bytes = int(mx.get_active_memory())
        return {"mlx_peak_bytes": int(mx.get_peak_memory()), "mlx_active_bytes": self._bytes}

    def _finish(self, cell: EngineCell, prompt_tokens: int, report: dict[str, Any]) -> Generation:
        gen = cell.finish(prompt_tokens, report)
        gen.engine_bytes = self._bytes
        return gen

    def engine_bytes(self) -> int | None:
        return self._bytes

    def close(self) -> None:
        self.model = self.tokenizer = None
        try:
            import mlx.core as mx

            mx.clear_cache()
        except ImportError:
            pass


def end_bias(model: Any, ends: list[int]) -> Any:
    """-inf at the end tokens over the model's output width (read from one
    forward: a quantized embedding's shape does not tell it)."""
    import mlx.core as mx

    width = int(model(mx.array([[0]])).shape[-1])
    bias = mx.zeros((width,), dtype=mx.float32)
    keep = [i for i in ends if i < width]
    if keep:
        bias[mx.array(keep)] = -mx.inf
    return bias


def load_local(module: Any, loader: Callable[[str], Any], path: Path) -> Any:
    """``loader(path)`` where the loader would download a hub id through
    ``module.snapshot_download``: the download is pointed at the local
    checkpoint directory a profile names."""
    original = module.snapshot_download
    module.snapshot_download = lambda repo_id, **_: str(path)
    try:
        return loader(str(path))
    finally:
        module.snapshot_download = original
