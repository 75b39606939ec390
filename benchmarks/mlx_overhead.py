"""What the lab costs on MLX, in one run:

1. lab ``mlx`` baseline tok/s / ``mlx_lm`` generate_step tok/s, same model
   object, same prompt, greedy (goal >= 0.95);
2. lab ``mlx-dflash`` tok/s / z-lab's reference DFlash loop tok/s, same tiny
   target and draft, same tokens required (goal >= 0.95), with the lab's
   default ``timing = "split"`` (a sync between draft and verify, so both are
   measured) and with ``timing = "fused"`` (one graph per step, like the
   reference).

tok/s here is (tokens - 1) / (time from the first token to the last), the
generation phase for both sides. Each ratio is measured ``--repeats`` times,
alternating sides; min / median / max are printed. A CPU-time ratio (process
CPU seconds per token, prompt included) is printed beside it: on a machine
shared with other work it moves far less than wall-clock tok/s.

    python -m benchmarks.mlx_overhead [--models tiny:qwen3,embedded:smollm2] [--tokens 128] [--repeats 5]

The reference part needs z-lab's ``dflash`` package importable (it is not a
dependency: its pins conflict with ours); without it that part is skipped.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Callable

from benchmarks.common import spread as _spread
from lab.api import BackendContext, GenerationRequest
from lab.base.events import Cell, TokenEvent
from lab.kit import models
from lab.profile.load import parse_profile

PROMPT = "Write a Python class LRUCache with get and put methods in O(1) time, using a dict and a doubly linked list."


def _ensure_tiny() -> None:
    # An install made before pyproject declared lab_mlx's entry point.
    if "tiny:qwen3" not in models._BUILDERS:
        from lab_mlx.models import register_models

        register_models(models.register_model)


def _arm(backend: str, model: str, options: str = "") -> Any:
    text = f"""
[run]
n_ctx = 2048
allow_outside_paths = true
[[prompts]]
name = "p"
text = "x"
[[arms]]
name = "a"
backend = "{backend}"
model = "{model}"
{options}
"""
    profile = parse_profile(text, "<bench>")
    return profile.arms[0], profile.run


class _Clock:
    """Times the generation phase from token events: first to last."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.n = 0

    def __call__(self, event: Any) -> None:
        if isinstance(event, TokenEvent):
            self.times.append(event.t)
            self.n += len(event.ids)

    def tok_per_s(self) -> float:
        return (self.n - 1) / (self.times[-1] - self.times[0])


def lab_run(backend: Any, tokens: int) -> tuple[float, list[int]]:
    req = GenerationRequest(Cell("a", "p", 1), PROMPT, None, True, tokens, 0.0, 0, True, None)
    clock = _Clock()
    gen = backend.generate(req, clock, lambda: False)
    return clock.tok_per_s(), gen.ids


def mlx_lm_run(model: Any, prompt_ids: list[int], tokens: int, mask: Any, stream: Any) -> tuple[float, list[int]]:
    import mlx.core as mx
    from mlx_lm.generate import generate_step

    def sampler(logits: Any) -> Any:
        return mx.argmax(logits + mask, axis=-1)

    out: list[int] = []
    t_first = 0.0
    for tok, _ in generate_step(mx.array(prompt_ids), model, stream=stream, max_tokens=tokens, sampler=sampler):
        out.append(int(tok))
        if len(out) == 1:
            t_first = time.perf_counter()
    return (len(out) - 1) / (time.perf_counter() - t_first), out


def bench_baseline(model_ref: str, tokens: int, repeats: int) -> list[float]:
    import numpy as np
    from lab_mlx.backend import MlxBackend

    arm, run = _arm("mlx", model_ref)
    backend = MlxBackend(arm, BackendContext(run, "", lambda s: None))
    backend.load(lambda e: None)
    try:
        assert backend.loaded is not None
        loaded = backend.loaded
        ids = loaded.vocab.prompt_ids(PROMPT, None, True)

        def reference() -> tuple[float, list[int]]:
            import mlx.core as mx

            bias = np.zeros(loaded.vocab.n_vocab, dtype=np.float32)
            bias[loaded.vocab.eog_ids] = -np.inf
            # Same engine thread as the lab side, so both use one stream and thread.
            assert backend.engine is not None
            stream = backend.engine.stream
            return backend.call(lambda: mlx_lm_run(loaded.model, ids, tokens, mx.array(bias), stream))

        return _alternate(model_ref, "mlx baseline / mlx_lm generate_step", lambda: lab_run(backend, tokens), reference, repeats)
    finally:
        backend.close()


def bench_dflash(draft_ref: str, tokens: int, block: int, repeats: int, timing: str) -> list[float]:
    from lab_mlx import reference
    from lab_mlx.dflash_backend import MlxDFlashBackend
    from lab_mlx.loader import load_target

    why = reference.available()
    if why:
        print(f"  skipped {draft_ref}: {why}")
        return []
    arm, run = _arm("mlx-dflash", "tiny:qwen3", f'options = {{ draft = "{draft_ref}", block_size = {block}, timing = "{timing}" }}')
    backend = MlxDFlashBackend(arm, BackendContext(run, "", lambda s: None))
    backend.load(lambda e: None)
    # The reference wraps the target's layers itself: give it its own copy.
    # It runs on this (main) thread: it uses mlx-lm's thread-local stream,
    # which must not die with our engine thread (C++ terminate at exit).
    ref_target = load_target(models.resolve("tiny:qwen3"))
    ref_draft = reference.load_reference_draft(models.resolve(draft_ref))
    try:
        ids = ref_target.vocab.prompt_ids(PROMPT, None, True)

        def theirs() -> tuple[float, list[int]]:
            r = reference.run_reference(ref_target.model, ref_draft, ref_target.vocab.hf, ids, block, tokens)
            return (len(r.tokens) - 1) / r.gen_s, r.tokens

        # ignore_eos=False on both sides: the reference cannot mask EOS.
        def ours() -> tuple[float, list[int]]:
            req = GenerationRequest(Cell("a", "p", 1), PROMPT, None, True, tokens, 0.0, 0, False, None)
            clock = _Clock()
            gen = backend.generate(req, clock, lambda: False)
            return clock.tok_per_s(), gen.ids

        return _alternate(f"tiny:qwen3 + {draft_ref} block {block} timing={timing}", "mlx-dflash / reference dflash loop", ours, theirs, repeats)
    finally:
        backend.close()


def _alternate(label: str, what: str, ours: Callable[[], tuple[float, list[int]]],
               theirs: Callable[[], tuple[float, list[int]]], repeats: int) -> list[float]:
    ours()  # warm both paths (graph caches, allocator)
    theirs()
    ratios, lab_tps, ref_tps, cpu_ratios = [], [], [], []
    for _ in range(repeats):
        c0 = time.process_time()
        a, ids_a = ours()
        c1 = time.process_time()
        b, ids_b = theirs()
        c2 = time.process_time()
        # CPU seconds per token (prompt included on both sides): steadier than
        # wall clock on a machine shared with other work.
        cpu_ratios.append(((c2 - c1) / len(ids_b)) / ((c1 - c0) / len(ids_a)))
        if ids_a != ids_b:
            i = next((j for j, (x, y) in enumerate(zip(ids_a, ids_b)) if x != y), min(len(ids_a), len(ids_b)))
            print(f"  {label}: tokens differ at {i} (lab {ids_a[i:i+1]}, reference {ids_b[i:i+1]})")
        lab_tps.append(a)
        ref_tps.append(b)
        ratios.append(a / b)
    print(f"{label}: {what}")
    print(f"  lab tok/s        {_spread(lab_tps)}")
    print(f"  reference tok/s  {_spread(ref_tps)}")
    print(f"  ratio            {_spread(ratios)}   (goal >= 0.95)")
    print(f"  cpu-time ratio   {_spread(cpu_ratios)}   (reference CPU s/token / lab CPU s/token)")
    return ratios


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="tiny:qwen3,embedded:smollm2")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--block", type=int, default=4)
    ap.add_argument("--no-dflash", action="store_true", help="skip the reference DFlash comparison")
    args = ap.parse_args(argv)
    from lab.registry import load_registry

    load_registry()  # model references (tiny:, synthetic:) resolve through the plugins' registry
    _ensure_tiny()
    for ref in [m for m in args.models.split(",") if m]:
        bench_baseline(ref, args.tokens, args.repeats)
    for draft in () if args.no_dflash else ("tiny:qwen3-dflash", "tiny:qwen3-dflash2"):
        for timing in ("split", "fused"):
            bench_dflash(draft, args.tokens, args.block, args.repeats, timing)
    return 0


if __name__ == "__main__":
    code = main()
    # mlx-lm's thread-local generation stream, once used from more than one
    # thread (mlx_lm and the reference here, the lab's engine threads), can
    # abort in C++ teardown at interpreter exit ("terminate called without
    # an active exception"); the figures are printed, so skip the teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
