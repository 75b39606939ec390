"""What measuring through the lab costs, on the embedded SmolLM2, in one run.

1. Streaming tax: the lab's streamed tok/s (httpx SSE with per-token
   timings, its own clock) divided by the server's own predicted_per_second
   for a bare non-streamed request to the same server. Goal >= 0.98.
2. Loop parity: the spine's in-process draft-model loop (llamacpp backend +
   draft-model drafter) divided by llama-server draft-simple with the same
   target/draft pair and n_max. Goal >= 0.95.

Prints ratios with min/median/max over repeats:
    python -m benchmarks.server_overhead [--repeats 3] [--tokens 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import spread


def _registry() -> Any:
    from lab.registry import load_registry

    reg = load_registry()
    if "llamacpp-server" not in reg.backends:
        import lab_llamacpp_server

        reg = load_registry([lab_llamacpp_server])
    return reg


def _summary(xs: list[float]) -> str:
    return spread(xs, count=True)


PROMPT = "Write a 300-word essay about why lighthouses still matter in the age of satellite navigation."


def streaming_tax(repeats: int, tokens: int, threads: int) -> list[float]:
    """lab streamed tok/s / bare non-streamed predicted_per_second, paired per repeat."""
    from lab.api import BackendContext, GenerationRequest
    from lab.base.events import Cell
    from lab.profile.load import parse_profile

    reg = _registry()
    text = f"""
[run]
max_tokens = {tokens}
n_ctx = 2048
threads = {threads}
[[prompts]]
name = "prose"
text = "{PROMPT}"
[[arms]]
name = "baseline"
backend = "llamacpp-server"
model = "embedded:smollm2"
"""
    profile = parse_profile(text, "server_overhead.toml", reg)
    arm = profile.arms[0]
    with tempfile.TemporaryDirectory() as tmp:
        backend = reg.backend(arm.backend)(arm, BackendContext(profile.run, tmp, lambda _: None))
        ratios: list[float] = []
        try:
            backend.load(lambda _e: None)
            assert backend._client is not None
            req = GenerationRequest(Cell("baseline", "prose", 0), PROMPT, None, True, tokens, 0.0, 0, True, None)
            prompt = backend._prompt(req)
            backend.generate(req, lambda _e: None, lambda: False)  # warm-up
            for i in range(repeats):
                req = GenerationRequest(Cell("baseline", "prose", i + 1), PROMPT, None, True, tokens, 0.0, 0, True, None)
                gen = backend.generate(req, lambda _e: None, lambda: False)
                lab_tps = len(gen.ids) / gen.gen_s
                r = backend._client.post("/completion", json={
                    "prompt": prompt, "n_predict": tokens, "temperature": 0.0, "seed": 0,
                    "ignore_eos": True, "stream": False, "cache_prompt": False,
                })
                bare_tps = float(r.json()["timings"]["predicted_per_second"])
                ratios.append(lab_tps / bare_tps)
                print(f"  repeat {i + 1}: lab streamed {lab_tps:7.1f} tok/s, bare request {bare_tps:7.1f} tok/s", file=sys.stderr)
        finally:
            backend.close()
    return ratios


def loop_parity(repeats: int, tokens: int, n_max: int, threads: int) -> tuple[list[float], dict[str, list[float]]]:
    """in-process draft-model loop tok/s / llama-server draft-simple tok/s."""
    from lab.profile.load import parse_profile
    from lab.runner import Runner

    reg = _registry()
    text = f"""
[run]
max_tokens = {tokens}
rounds = {repeats}
warmup = 1
n_ctx = 2048
threads = {threads}
probe = false
[[prompts]]
name = "prose"
text = "{PROMPT}"
[[arms]]
name = "inproc"
backend = "llamacpp"
model = "embedded:smollm2"
drafter = "draft-model"
n_max = {n_max}
drafter_options = {{ model = "embedded:smollm2-q4_0" }}
[[arms]]
name = "server"
backend = "llamacpp-server"
model = "embedded:smollm2"
n_max = {n_max}
options = {{ spec_type = "draft-simple", draft_model = "embedded:smollm2-q4_0" }}
"""
    profile = parse_profile(text, "server_overhead.toml", reg)
    rows = Runner(profile, reg).run()
    tps: dict[str, list[float]] = {"inproc": [], "server": [], "acc_inproc": [], "acc_server": []}
    for row in rows:
        if row["status"] != "ok":
            raise RuntimeError(f"{row['arm']}: {row['status']}: {row['detail'][:400]}")
        tps[row["arm"]].append(row["tok_per_s"])
        tps["acc_" + row["arm"]].append(row["acceptance_rate"] or 0.0)
    ratios = [a / b for a, b in zip(tps["inproc"], tps["server"])]
    return ratios, tps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--n-max", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2, help="threads for every engine (same for both sides)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))

    print("1. streaming tax: lab streamed tok/s / bare non-streamed predicted_per_second (goal >= 0.98)")
    tax = streaming_tax(args.repeats, args.tokens, args.threads)
    print(f"   ratio {_summary(tax)}")
    print(f"2. loop parity: in-process draft-model loop / llama-server draft-simple, n_max {args.n_max} (goal >= 0.95)")
    parity, tps = loop_parity(args.repeats, args.tokens, args.n_max, args.threads)
    print(f"   in-process tok/s {_summary(tps['inproc'])}; acceptance {statistics.median(tps['acc_inproc']):.3f}")
    print(f"   server     tok/s {_summary(tps['server'])}; acceptance {statistics.median(tps['acc_server']):.3f}")
    print(f"   ratio {_summary(parity)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
