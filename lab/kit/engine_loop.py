"""For a backend that runs an engine's own generation loop instead of the
lab's (mlx-lm's, z-lab's dflash, dflash-mlx): turning what that loop yields
into the lab's token and step events.

Counts and seconds come only from what the engine yields or reports; a
second the engine does not report is None with :data:`Clock.NONE`, and a
step's own seconds, where the engine gives none, are the arrival times of
its yields at the lab (:data:`Clock.CLIENT`). Nothing here imports an
engine."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from lab.api import Cancelled, Generation, GenerationRequest
from lab.base.events import Clock, Emit, StepClocks, StepEvent, TokenEvent, now

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
    """A target model whose logits come out with ``bias`` added (-inf at the
    end tokens while a request ignores EOS, None otherwise): for an engine
    whose loop takes no logit bias of its own. Everything else is the
    model's."""

    def __init__(self, model: Any) -> None:
        self.__dict__["_inner"] = model
        self.__dict__["bias"] = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        out = self._inner(*args, **kwargs)
        return out if self.bias is None else out + self.bias

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_inner"], name)


def lab_loop(backend: str, drafter: str | None = None, **options: Any) -> dict[str, Any]:
    """Which of the lab's own arms runs the same algorithm on the same files
    as an engine arm: the backend, the drafter, and the options (backend
    options, or the drafter's for a drafter) that must be equal; the
    report's engines section (:mod:`lab.render.engines`) pairs them by it."""
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
