"""A scripted fake backend for TUI and runner tests (never for measuring).

Register it with ``load_registry(extra_plugins=[fake_plugin])`` (or use
``fake_registry()``) and write arms such as::

    [[arms]]
    name = "spec"
    backend = "fake"
    n_max = 4
    options = { speculative = true, accepted = [4, 2, 0], virtual_clock = true }

Each step drafts ``n_max`` tokens (or ``drafted``) and accepts the next number of the
``accepted`` pattern (cycled), so acceptance and mean accepted length are
known in advance. With ``overdraft`` a step drafts n_max tokens however few
the budget leaves, and the last step lands only what is left (fewer than
accepted + 1), as a server does when the token limit cuts a step.
``mode`` makes an arm fail (oom, crash, error) after
``fail_after`` tokens (0: while loading) or run slowly (slow). With
``virtual_clock`` every timestamp and duration is synthetic, so tok/s,
speedup and step cost are exact numbers; otherwise it streams as fast as
``token_delay_s`` lets it. ``spawn_child`` starts a stand-in engine process
that close() must stop, for tests that quitting leaves no engine behind.
``texts`` streams other words in each generation (rounds whose engine state
changes its output) and ``round_state = "reset"`` counts the runner's resets.

The TUI snapshots of saved runs (tests/tui/__snapshots__) show this default
stream and its virtual timings: change WORDS or the defaults and update
them with ``pytest tests/tui/test_snapshots.py --snapshot-update``.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Any, Callable, ClassVar, Mapping

from lab.api import Backend, Cancelled, EngineCrashed, EngineFailure, EngineOOM, Generation, GenerationRequest, Option
from lab.base.events import Emit, Status, StatusChanged, StepEvent, TokenEvent, arm_cell, now
from lab.hookspecs import hookimpl
from lab.registry import Registry, load_registry

WORDS = (
    "the lighthouse keeper watched the long grey swell roll in from the north while the lamp "
    "turned above him and ships far out counted its flashes to find their way home"
).split()


class FakeBackend(Backend):
    name = "fake"
    stack = "fake"
    description = "scripted token stream for tests"
    options = (
        Option("speculative", bool, False, "draft n_max tokens per step"),
        Option("drafted", int, 0, "tokens drafted per step (0: n_max)"),
        Option("accepted", list, None, "accepted tokens per step, cycled (default [n_max // 2])"),
        Option("mode", str, "ok", "ok, or how the arm fails", choices=("ok", "oom", "crash", "error", "slow")),
        Option("fail_after", int, 0, "tokens generated before the failure (0: fail while loading)"),
        Option("token_delay_s", float, 0.0, "real seconds to sleep per landed token (slow mode: 0.02 if unset)"),
        Option("load_s", float, 0.0, "real seconds the load takes"),
        Option("virtual_clock", bool, False, "synthetic timestamps and durations"),
        Option("virtual_token_s", float, 0.01, "virtual seconds per target token"),
        Option("virtual_draft_s", float, 0.002, "virtual seconds per drafted token"),
        Option("overdraft", bool, False, "draft n_max even at the end; the last step lands what the budget leaves"),
        Option("spawn_child", bool, False, "start a stand-in engine process"),
        Option("busy_cores", int, 0, "CPU cores it says it keeps busy (the TUI's cadence tests)"),
        Option("text", str, "", "words to stream (default: a fixed sentence)"),
        Option("texts", list, None, "words per generation of the engine, in order, the last repeating (beats text)"),
        Option("round_state", str, "none", "what it says it keeps across requests", choices=("none", "reset")),
    )

    instances: ClassVar[list[FakeBackend]] = []
    _lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def busy_cores(cls, arm_options: Mapping[str, Any], threads: int) -> int:
        # It sleeps or runs a virtual clock: other processes cannot slow it,
        # so by default the noise guard (lab.telemetry.contention) leaves every core
        # spare; the cadence tests give it a claim to weigh.
        return int(arm_options.get("busy_cores") or 0)

    @classmethod
    def is_speculative(cls, arm_options: Mapping[str, Any], drafter: str | None) -> bool:
        return bool(arm_options.get("speculative", False)) or drafter is not None

    def __init__(self, arm: Any, ctx: Any) -> None:
        super().__init__(arm, ctx)
        self.opts = dict(arm.options)
        self.loaded = False
        self.closed = False
        self.child: subprocess.Popen[bytes] | None = None
        self.generated = 0
        self.generations = 0
        self.resets = 0
        with FakeBackend._lock:
            FakeBackend.instances.append(self)

    @classmethod
    def round_state(cls, arm_options: Mapping[str, Any]) -> str:
        return str(arm_options.get("round_state") or "none")

    def reset_round(self, emit: Emit) -> None:
        self.resets += 1

    def _opt(self, name: str) -> Any:
        for o in self.options:
            if o.name == name:
                return self.opts.get(name, o.default)
        raise KeyError(name)

    def _fail(self) -> None:
        mode = self._opt("mode")
        excerpt = f"fake engine log\n[{self.arm.name}] mode={mode} after {self.generated} tokens"
        if mode == "oom":
            raise EngineOOM("fake: out of memory allocating the KV cache", excerpt)
        if mode == "crash":
            raise EngineCrashed("fake: engine process exited with signal 11", excerpt)
        if mode == "error":
            raise EngineFailure("fake: engine reported an error", excerpt)

    def load(self, emit: Emit) -> None:
        cell = arm_cell(self.arm.name)
        load_s = float(self._opt("load_s"))
        for i, phase in enumerate(("reading weights", "creating context")):
            emit(StatusChanged(cell, Status.LOADING, phase=phase, progress=(i + 1) / 2))
            if load_s:
                time.sleep(load_s / 2)
        if self._opt("spawn_child"):
            self.child = subprocess.Popen(
                [sys.executable, "-c", "import time; time.sleep(600)"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
        if self._opt("mode") in ("oom", "crash", "error") and int(self._opt("fail_after")) == 0:
            self._fail()
        self.loaded = True

    def child_pids(self) -> list[int]:
        return [self.child.pid] if self.child is not None and self.child.poll() is None else []

    def generate(self, request: GenerationRequest, emit: Emit, cancelled: Callable[[], bool]) -> Generation:
        texts = list(self._opt("texts") or [])
        chosen = str(texts[min(self.generations, len(texts) - 1)]) if texts else str(self._opt("text"))
        self.generations += 1
        words = (chosen or " ".join(WORDS)).split()
        speculative = self.is_speculative(self.opts, self.arm.drafter)
        n_max = int(self._opt("drafted")) or request.n_max or 0
        pattern = list(self._opt("accepted") or [max(0, n_max // 2)])
        virtual = bool(self._opt("virtual_clock"))
        tok_s = float(self._opt("virtual_token_s"))
        draft_tok_s = float(self._opt("virtual_draft_s"))
        delay = float(self._opt("token_delay_s")) or (0.02 if self._opt("mode") == "slow" else 0.0)
        fail_after = int(self._opt("fail_after"))
        failing = self._opt("mode") in ("oom", "crash", "error") and fail_after > 0
        overdraft = bool(self._opt("overdraft"))

        t0 = now()
        clock = [0.0]  # virtual seconds since the start of generation
        ids: list[int] = []
        parts: list[str] = []

        def t() -> float:
            return t0 + clock[0] if virtual else now()

        def land(n: int, from_draft: bool) -> None:
            new = [(len(ids) + i) % len(words) for i in range(n)]
            text = "".join(words[i] + " " for i in new)
            ids.extend(new)
            parts.append(text)
            self.generated += n
            emit(TokenEvent(request.cell, text, tuple(new), from_draft, t=t()))
            if delay:
                time.sleep(delay * n)

        clock[0] += tok_s  # prompt processing ends with the first token
        prompt_s = tok_s
        land(1, False)
        step = 0
        while len(ids) < request.max_tokens:
            if cancelled():
                raise Cancelled()
            if failing and len(ids) >= fail_after:
                self._fail()
            remaining = request.max_tokens - len(ids)
            k = (n_max if overdraft else min(n_max, remaining - 1)) if speculative else 0
            if k <= 0:
                clock[0] += tok_s
                land(1, False)
                continue
            acc = min(k, int(pattern[step % len(pattern)]))
            landed = min(acc + 1, remaining)
            step += 1
            t_a = now()
            draft_s = draft_tok_s * k
            verify_s = tok_s * 1.2
            clock[0] += draft_s + verify_s
            land(min(acc, landed), True) if acc else None
            if landed > acc:
                land(1, False)
            real = now() - t_a
            emit(StepEvent(
                request.cell, step - 1, drafted=k, accepted=acc, landed=landed,
                draft_s=draft_s if virtual else real * 0.3, verify_s=verify_s if virtual else real * 0.7,
                step_s=draft_s + verify_s if virtual else real, t=t(),
            ))
        gen_s = clock[0] - prompt_s if virtual else now() - t0
        return Generation(text="".join(parts), ids=ids, prompt_tokens=8, prompt_s=prompt_s, gen_s=max(gen_s, 1e-9))

    def pauses_between_steps(self) -> bool:
        return True

    def close(self) -> None:
        self.closed = True
        if self.child is not None:
            self.child.terminate()
            try:
                self.child.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.child.kill()
                self.child.wait()


class FakePlugin:
    """An object with hookimpls, for ``load_registry(extra_plugins=...)``."""

    __name__ = "tests.fakes"

    @hookimpl
    def lab_register_backends(self, register: Callable[[type[Backend]], None]) -> None:
        register(FakeBackend)


fake_plugin = FakePlugin()


def fake_registry() -> Registry:
    return load_registry(extra_plugins=[fake_plugin])


def profile_toml(
    arms: str,
    *,
    name: str = "fake",
    max_tokens: int = 24,
    rounds: int = 1,
    warmup: int = 0,
    prompts: tuple[str, ...] = ("prose",),
) -> str:
    """A profile around ``arms`` (TOML [[arms]] tables)."""
    head = (
        f'[profile]\nname = "{name}"\n\n[run]\nmax_tokens = {max_tokens}\nrounds = {rounds}\n'
        f"warmup = {warmup}\nmemory_interval_s = 0.05\n\n"
    )
    body = "".join(f'[[prompts]]\nname = "{p}"\ntext = "Write about {p}."\n\n' for p in prompts)
    return head + body + arms


BASE_AND_SPEC = """
[[arms]]
name = "base"
backend = "fake"
options = { virtual_clock = true }

[[arms]]
name = "spec"
backend = "fake"
n_max = 4
options = { speculative = true, accepted = [4, 2, 0], virtual_clock = true }
"""
