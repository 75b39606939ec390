"""The lab's MLX loops beside the engines Mac users run, cell by cell:

1. lab ``mlx`` baseline / ``mlx-lm`` (mlx-lm's plain ``stream_generate``);
2. lab ``mlx-dflash`` (``timing = "fused"``) / ``zlab-dflash`` (z-lab's loop);
3. lab ``mlx-dflash`` / ``dflash-mlx`` with a fixed block and with its
   default adaptive block.

Each side runs as its backend runs in a profile, on the same files and the
same prompt, greedy, ``--repeats`` times per pair, the two sides alternating
(which goes first alternates too), so load that comes and goes meets both.
Printed per pair: generation-phase tok/s ratio (lab / engine) and the
ratio of process CPU seconds per token (engine / lab, so above 1 the lab's
loop costs less), min / median / max; on a machine shared with other work
the CPU ratio moves far less than the wall-clock one.

    python -m benchmarks.mac_engines [--tokens 64] [--repeats 6] [--pairs baseline,zlab,dflash-mlx,adaptive]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from benchmarks.common import spread
from lab.api import BackendContext, GenerationRequest
from lab.base.events import Cell
from lab.profile.load import parse_profile
from lab.registry import load_registry

PROMPT = "Write a Python class LRUCache with get and put methods in O(1) time, using a dict and a doubly linked list."
ARMS = {
    "lab-base": 'backend = "mlx"',
    "mlx-lm": 'backend = "mlx-lm"',
    "lab-dflash": 'backend = "mlx-dflash"\nn_max = 3\noptions = { draft = "tiny:qwen3-dflash", timing = "fused" }',
    "zlab": 'backend = "zlab-dflash"\nn_max = 3\noptions = { draft = "tiny:qwen3-dflash" }',
    "dflash-mlx": 'backend = "dflash-mlx"\nn_max = 3\noptions = { draft = "tiny:qwen3-dflash", verify_mode = "dflash" }',
    "adaptive": 'backend = "dflash-mlx"\nn_max = 3\noptions = { draft = "tiny:qwen3-dflash" }',
}
PAIRS = {"baseline": ("lab-base", "mlx-lm"), "zlab": ("lab-dflash", "zlab"),
         "dflash-mlx": ("lab-dflash", "dflash-mlx"), "adaptive": ("lab-dflash", "adaptive")}


def _profile(tokens: int, model: str) -> Any:
    arms = "".join(f'\n[[arms]]\nname = "{n}"\nmodel = "{model}"\n{body}\n' for n, body in ARMS.items())
    text = f"""
[run]
max_tokens = {tokens}
temperature = 0.0
chat_template = true
ignore_eos = true
n_ctx = 2048

[[prompts]]
name = "code"
text = "{PROMPT}"
{arms}"""
    return parse_profile(text, "<mac-engines>", load_registry())


def _cell(backend: Any, arm: Any, run: int, tokens: int) -> tuple[float, float]:
    """Generation-phase tok/s and process CPU seconds per token of one cell."""
    req = GenerationRequest(cell=Cell(arm.name, "code", run), prompt=PROMPT, system=None, chat_template=True,
                            max_tokens=tokens, temperature=0.0, seed=0, ignore_eos=True, n_max=arm.n_max)
    cpu = time.process_time()
    gen = backend.generate(req, lambda _e: None, lambda: False)
    cpu = time.process_time() - cpu
    return len(gen.ids) / gen.gen_s, cpu / len(gen.ids)


def main() -> None:
    # mlx-lm makes a thread-local stream when its generate module is first
    # imported; imported first on a lab arm's engine thread, which ends, the
    # process crashed at exit once mlx-lm had generated on this thread
    import mlx_lm.generate  # noqa: F401

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny:qwen3")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--pairs", default=",".join(PAIRS), help=f"which of {', '.join(PAIRS)}")
    args = ap.parse_args()
    registry = load_registry()
    profile = _profile(args.tokens, args.model)
    arms = {a.name: a for a in profile.arms}
    loaded: dict[str, Any] = {}

    def backend(name: str) -> Any:
        if name not in loaded:
            arm = arms[name]
            b = registry.backend(arm.backend)(arm, BackendContext(run=profile.run, run_dir=".", log=lambda _s: None))
            b.load(lambda _e: None)
            _cell(b, arm, 0, args.tokens)  # warmup: graphs built, caches allocated
            loaded[name] = b
        return loaded[name]

    keys = [k for k in args.pairs.split(",") if k]
    try:
        for name in dict.fromkeys(n for k in keys for n in PAIRS[k]):
            backend(name)  # every side loaded and warmed before any is timed
        for key in keys:
            lab, eng = PAIRS[key]
            tps, cpu = [], []
            for r in range(args.repeats):
                order = (lab, eng) if r % 2 == 0 else (eng, lab)
                got = {name: _cell(backend(name), arms[name], r + 1, args.tokens) for name in order}
                tps.append(got[lab][0] / got[eng][0])
                cpu.append(got[eng][1] / got[lab][1])
            print(f"{lab} / {eng} tok/s: {spread(tps, '.2f', count=True)}")
            print(f"{eng} / {lab} CPU s per token: {spread(cpu, '.2f', count=True)}")
    finally:
        for b in loaded.values():
            b.close()


if __name__ == "__main__":
    main()
