"""A fake target for a drafter plugin's unit tests: drive ``draft()``
without a model.

:class:`FakeTarget` cycles through ``pattern``; :func:`run_drafter` drives a
drafter as the verify loop does and raises :class:`ContractBroken` naming the
step where a draft breaks the contract."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from lab.api import Draft, Drafter, DrafterContext, Option
from lab.base.cells import Cell


class ContractBroken(AssertionError):
    """A drafter answered something the verify loop would refuse."""


@dataclass(frozen=True)
class FakeTarget:
    """Greedy next token = the token after the context's last one in
    ``pattern`` (cyclic); a token outside the pattern is followed by
    ``pattern[0]``."""

    pattern: tuple[int, ...] = tuple(range(2, 12))
    vocab_size: int = 32

    def __post_init__(self) -> None:
        if not self.pattern or any(not 0 <= t < self.vocab_size for t in self.pattern):
            raise ValueError(f"pattern {self.pattern} must be non-empty ids below vocab_size {self.vocab_size}")

    def next_token(self, context: Sequence[int]) -> int:
        last = context[-1] if context else -1
        try:
            return self.pattern[(self.pattern.index(last) + 1) % len(self.pattern)]
        except ValueError:
            return self.pattern[0]


@dataclass
class FakeRun:
    """What one generation against the fake target gave."""

    ids: list[int] = field(default_factory=list)  # the generated token ids (the target's greedy output)
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    log: list[str] = field(default_factory=list)  # lines the drafter wrote with ctx.log

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0


def drafter_context(target: FakeTarget | None = None, log: Callable[[str], None] | None = None,
                    **overrides: Any) -> DrafterContext:
    """A :class:`~lab.api.DrafterContext` for the fake target; ``overrides``
    replace any field (``temperature``, ``n_ctx``, ``reference``...)."""
    target = target or FakeTarget()
    values: dict[str, Any] = dict(
        stack="fake", target_model=None, vocab_size=target.vocab_size, n_ctx=4096, threads=1, seed=0,
        temperature=0.0, reference=lambda prompt, round: None, log=log or (lambda line: None), draft_model=None,
    )
    values.update(overrides)
    return DrafterContext(**values)


def make_drafter(cls: type[Drafter], options: Mapping[str, Any] | None = None,
                 target: FakeTarget | None = None, log: Callable[[str], None] | None = None) -> Drafter:
    """``cls`` built as the lab builds it: options checked (ValueError),
    defaults filled in, then ``load()``."""
    options = dict(options or {})
    declared = {o.name: o for o in cls.options}
    for name, value in options.items():
        if name not in declared:
            raise ValueError(f"drafter {cls.name!r} has no option {name!r}; it declares {sorted(declared)}")
        why = _value_problem(declared[name], value)
        if why:
            raise ValueError(f"drafter {cls.name!r}, option {name!r}: {why}")
    filled = {**{o.name: o.default for o in cls.options}, **options}
    problems = cls.check_options(filled)
    if problems:
        raise ValueError(f"drafter {cls.name!r}: {problems[0]}")
    drafter = cls(options, drafter_context(target, log))
    drafter.load()
    return drafter


def _value_problem(opt: Option, value: Any) -> str | None:
    kinds: tuple[type, ...] = (float, int) if opt.type is float else (opt.type,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and opt.type is not bool):
        return f"expected {opt.type.__name__}, got {type(value).__name__}"
    if opt.choices is not None and value not in opt.choices:
        return f"{value!r} is not one of {list(opt.choices)}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if opt.min is not None and value < opt.min:
        return f"{value} is below the minimum {opt.min}"
    if opt.max is not None and value > opt.max:
        return f"{value} is above the maximum {opt.max}"
    return None


def run_drafter(drafter: Drafter, prompt_ids: Sequence[int], max_tokens: int = 64, n_max: int = 4,
                target: FakeTarget | None = None, cell: Cell | None = None) -> FakeRun:
    """One greedy generation of ``max_tokens`` against ``target`` with
    ``drafter`` proposing up to ``n_max`` tokens a step."""
    if not prompt_ids:
        raise ValueError("prompt_ids is empty: a rendered prompt has at least one token")
    if max_tokens < 1 or n_max < 0:
        raise ValueError(f"max_tokens must be >= 1 and n_max >= 0, got {max_tokens} and {n_max}")
    target = target or FakeTarget(vocab_size=drafter.ctx.vocab_size)
    run = FakeRun()
    drafter.begin(list(prompt_ids), cell or Cell("fake", "fake", 1))
    context = list(prompt_ids)
    first = target.next_token(context)  # the prompt's own pass gives the first token
    context.append(first)
    run.ids.append(first)
    while len(run.ids) < max_tokens:
        k = min(n_max, max_tokens - len(run.ids) - 1)
        drafted: tuple[int, ...] = ()
        if k > 0:
            d = drafter.draft(list(context), k)
            drafted = _checked(d, k, target.vocab_size, run.steps)
        run.steps += 1
        run.drafted += len(drafted)
        for token in drafted:
            if token != target.next_token(context):
                break
            context.append(token)
            run.ids.append(token)
            run.accepted += 1
        own = target.next_token(context)  # the correction, or the bonus token after a full accept
        context.append(own)
        run.ids.append(own)
    del run.ids[max_tokens:]
    return run


def _checked(d: Any, k: int, vocab: int, step: int) -> tuple[int, ...]:
    if not isinstance(d, Draft):
        raise ContractBroken(f"step {step}: draft() returned {type(d).__name__}, not lab.api.Draft")
    tokens = tuple(d.tokens)
    if len(tokens) > k:
        raise ContractBroken(f"step {step}: {len(tokens)} tokens drafted for k = {k} (the loop cuts the rest)")
    for t in tokens:
        if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < vocab:
            raise ContractBroken(f"step {step}: token {t!r} is not an id in the vocabulary (0..{vocab - 1})")
    if d.probs is not None:
        if len(d.probs) != len(tokens):
            raise ContractBroken(f"step {step}: {len(d.probs)} distributions for {len(tokens)} tokens")
        for i, p in enumerate(d.probs):
            if len(p) != vocab:
                raise ContractBroken(f"step {step}: distribution {i} has {len(p)} entries, the vocabulary {vocab}")
    return tokens
