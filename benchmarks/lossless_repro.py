"""Does a position's greedy pick depend on how many rows its llama_decode had?

Greedy speculative decoding is lossless only if the target computes a
position's logits the same way whether it decodes that position alone (the
baseline: one row per llama_decode) or as one row of a verify batch
(``[last] + draft``, every row asking for logits). This script checks that
with llama.cpp's own API through llama-cpp-python's ctypes functions; no lab
code runs, the lab only finds the model file when given a ``embedded:``/``tiny:``
reference.

For one prompt it
  1. decodes the greedy baseline one row at a time, keeping every row's logits;
  2. replays the same tokens in a fresh context as verify batches of ``width``
     rows (an oracle draft at 100 % acceptance: exactly what the lab's oracle
     arm decodes) and compares each row's logits with the baseline's, bit for
     bit, and its argmax.

It prints, per configuration: rows whose logits are bit-identical, the
largest logit difference, argmax flips (a flip is where greedy speculation
leaves the baseline) and the first flip's position and KV length. The
configurations vary what could matter: flash attention, weight repacking
(extra buffer types), threads, and ``pad``: every one-row decode gets a second
row (the same token one position on, logits requested, removed again), so no
decode ever runs llama.cpp's one-row kernels.

    python -m benchmarks.lossless_repro [--model embedded:smollm2] [--tokens 400] [--width 5]
        [--prompt TEXT] [--threads 2] [--configs default,pad,...]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import time
from dataclasses import dataclass

import numpy as np

# The demo's code prompt as SmolLM2's chat template lays it out.
CODE_PROMPT = (
    "<|im_start|>user\nWrite a Python class LRUCache with get and put methods in O(1) time, using a dict and "
    "a doubly linked list. Include docstrings and a short usage example.<|im_end|>\n<|im_start|>assistant\n"
)


@dataclass(frozen=True)
class Config:
    name: str
    flash_attn: str = "auto"  # auto | on | off
    repack: bool = True
    pad: bool = False


CONFIGS = {
    c.name: c
    for c in (
        Config("default"),
        Config("pad", pad=True),
        Config("fa-off", flash_attn="off"),
        Config("fa-off+pad", flash_attn="off", pad=True),
        Config("no-repack", repack=False),
        Config("no-repack+pad", repack=False, pad=True),
    )
}


def resolve(ref: str) -> str:
    if os.path.exists(ref):
        return ref
    from lab.kit.models import resolve as lab_resolve

    return str(lab_resolve(ref))


class Engine:
    """The few llama.cpp calls the check needs."""

    def __init__(self, path: str, cfg: Config, threads: int, n_ctx: int) -> None:
        import llama_cpp as ll

        self.ll = ll
        mp = ll.llama_model_default_params()
        mp.use_extra_bufts = cfg.repack
        self.model = ll.llama_model_load_from_file(path.encode(), mp)
        if not self.model:
            sys.exit(f"llama.cpp could not load {path}")
        self.vocab = ll.llama_model_get_vocab(self.model)
        self.n_vocab = int(ll.llama_vocab_n_tokens(self.vocab))
        cp = ll.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = cp.n_ubatch = 512
        cp.n_threads = cp.n_threads_batch = threads
        cp.flash_attn_type = {
            "auto": ll.LLAMA_FLASH_ATTN_TYPE_AUTO,
            "on": ll.LLAMA_FLASH_ATTN_TYPE_ENABLED,
            "off": ll.LLAMA_FLASH_ATTN_TYPE_DISABLED,
        }[cfg.flash_attn]
        self.ctx = ll.llama_init_from_model(self.model, cp)
        self.mem = ll.llama_get_memory(self.ctx)
        self.batch = ll.llama_batch_init(512, 0, 1)
        self.pad = cfg.pad
        self.n_past = 0

    def tokenize(self, text: str) -> list[int]:
        raw = text.encode()
        buf = (self.ll.llama_token * (len(raw) + 16))()
        n = self.ll.llama_tokenize(self.vocab, raw, len(raw), buf, len(buf), False, True)
        return list(buf[:n])

    def decode(self, tokens: list[int], all_logits: bool) -> list[np.ndarray]:
        """Decode at n_past; the logits of the rows asked for (the last only,
        or all), copied."""
        rows = list(tokens)
        padded = self.pad and len(rows) == 1
        if padded:
            rows.append(rows[0])
        b = self.batch
        for i, tok in enumerate(rows):
            b.token[i] = tok
            b.pos[i] = self.n_past + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = all_logits or padded or i == len(rows) - 1
        b.n_tokens = len(rows)
        if self.ll.llama_decode(self.ctx, b) != 0:
            sys.exit("llama_decode failed")
        self.n_past += len(tokens)
        if padded:
            self.ll.llama_memory_seq_rm(self.mem, 0, self.n_past, -1)
        wanted = range(len(tokens)) if all_logits else [len(tokens) - 1]
        return [
            np.ctypeslib.as_array(self.ll.llama_get_logits_ith(self.ctx, i), shape=(self.n_vocab,)).copy()
            for i in wanted
        ]

    def close(self) -> None:
        self.ll.llama_batch_free(self.batch)
        self.ll.llama_free(self.ctx)
        self.ll.llama_model_free(self.model)


def kv_len(pos: int) -> int:
    """The KV length llama.cpp attends over at a position (padded to 256)."""
    return max(256, -(-(pos + 1) // 256) * 256)


def check(path: str, cfg: Config, prompt: str, n_tokens: int, width: int, threads: int) -> dict[str, object]:
    eng = Engine(path, cfg, threads, 2048)
    ids = eng.tokenize(prompt)
    t0 = time.perf_counter()
    eng.decode(ids[:-1], all_logits=False)
    base_logits: list[np.ndarray] = []
    out: list[int] = []
    last = ids[-1]
    for _ in range(n_tokens):
        row = eng.decode([last], all_logits=False)[0]
        base_logits.append(row)
        last = int(row.argmax())
        out.append(last)
    base_s = time.perf_counter() - t0
    eng.close()

    eng = Engine(path, cfg, threads, 2048)
    eng.decode(ids[:-1], all_logits=False)
    feed = [ids[-1], *out]
    same = flips = 0
    first_diff: int | None = None
    max_diff = 0.0
    first_flip: tuple[int, int] | None = None
    i = 0
    t0 = time.perf_counter()
    while i < n_tokens:
        chunk = feed[i : min(i + width, n_tokens)]
        rows = eng.decode(chunk, all_logits=True)
        for j, row in enumerate(rows):
            ref = base_logits[i + j]
            if np.array_equal(row, ref):
                same += 1
            else:
                max_diff = max(max_diff, float(np.abs(row - ref).max()))
                if first_diff is None:
                    first_diff = i + j
            if int(row.argmax()) != out[i + j]:
                flips += 1
                if first_flip is None:
                    first_flip = (i + j, len(ids) - 1 + i + j)
        i += len(chunk)
    verify_s = time.perf_counter() - t0
    eng.close()
    return {
        "config": cfg.name, "rows": n_tokens, "identical_rows": same, "max_logit_diff": max_diff,
        "first_differing_row": None if first_diff is None else {"token": first_diff, "pos": len(ids) + first_diff - 1},
        "argmax_flips": flips,
        "first_flip": None if first_flip is None else {"token": first_flip[0], "pos": first_flip[1], "n_kv": kv_len(first_flip[1])},
        "baseline_tok_s": round(n_tokens / base_s, 1), "verify_tok_s": round(n_tokens / verify_s, 1),
    }


def baseline_tok_s(path: str, cfg: Config, prompt: str, n_tokens: int, threads: int) -> float:
    """Generation-phase speed of the one-row greedy baseline."""
    eng = Engine(path, cfg, threads, 2048)
    ids = eng.tokenize(prompt)
    eng.decode(ids[:-1], all_logits=False)
    last = ids[-1]
    t0 = time.perf_counter()
    for _ in range(n_tokens):
        last = int(eng.decode([last], all_logits=False)[0].argmax())
    seconds = time.perf_counter() - t0
    eng.close()
    return n_tokens / seconds


def speed(path: str, names: list[str], prompt: str, n_tokens: int, threads: int, repeats: int) -> None:
    """Baseline tok/s per configuration, the configurations alternating so
    that machine noise hits each alike; the first is the reference."""
    runs: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(repeats):
        for name in names:
            runs[name].append(baseline_tok_s(path, CONFIGS[name], prompt, n_tokens, threads))
    ref = statistics.median(runs[names[0]])
    for name, values in runs.items():
        med = statistics.median(values)
        print(
            f"{name:<14} baseline tok/s min {min(values):.1f} median {med:.1f} max {max(values):.1f}"
            f"  median / {names[0]} {med / ref:.3f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="embedded:smollm2")
    ap.add_argument("--prompt", default=CODE_PROMPT, help="raw text, special tokens parsed (default: the demo's code prompt, chat-formatted)")
    ap.add_argument("--tokens", type=int, default=400)
    ap.add_argument("--width", type=int, default=5, help="rows per verify batch (n_max + 1)")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--speed", type=int, default=0, metavar="REPEATS", help="time the baseline per config instead of comparing logits")
    args = ap.parse_args()
    from lab.registry import load_registry

    load_registry()  # model references (tiny:, synthetic:) resolve through the plugins' registry

    import llama_cpp as ll

    @ll.llama_log_callback  # type: ignore[misc]
    def quiet(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        return None

    ll.llama_log_set(quiet, ctypes.c_void_p(0))
    ll.llama_backend_init()
    path = resolve(args.model)
    print(f"model {path}, {args.tokens} tokens, verify width {args.width}, {args.threads} threads")
    if args.speed:
        speed(path, args.configs.split(","), args.prompt, args.tokens, args.threads, args.speed)
        return
    for name in args.configs.split(","):
        r = check(path, CONFIGS[name], args.prompt, args.tokens, args.width, args.threads)
        print(
            f"{r['config']:<14} identical rows {r['identical_rows']:>4}/{r['rows']} (first other {r['first_differing_row']})"
            f"  max |dlogit| {r['max_logit_diff']:.3g}"
            f"  argmax flips {r['argmax_flips']:>3}  first flip {r['first_flip']}"
            f"  baseline {r['baseline_tok_s']} tok/s"
        )
        sys.stdout.flush()


if __name__ == "__main__":
    main()
