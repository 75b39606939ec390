"""Verify cost on llama.cpp, two ways.

``decode``: in this process, after a fixed prefix, one ``llama_decode`` of
w rows of one sequence with logits for every row (a verify), rolled back
after each pass, a short block of each width's passes back to back in the
order asked (the probe driver turns that order each cycle, so blocks of
different widths alternate).
``batched-bench``: llama-batched-bench decoding w parallel sequences; a pass
of w rows takes w / S_TG(w) seconds.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

from lab.kit.llama_tools import find_llama_tool, missing_tool_hint
from lab.kit.pass_order import check_order, median_pass_seconds

if TYPE_CHECKING:
    from lab_llamacpp.engine import Context

# Context the verified rows attend to: a mid-generation prefix, short enough
# that the tiny model's passes stay weight-bound like the write-ups' 400-token runs.
PREFIX_TOKENS = 128
# Timed passes of a width's block in one call; their median is the call's figure
# (the driver repeats calls, cycling the widths, until the figures are stable).
BLOCK_PASSES = 3
# Passes per width of the switch and cell tables (timed once per depth, on a GPU).
INNER_PASSES = 7
_PREFIX_TEXT = (
    "The lighthouse keeper climbed the spiral stairs every evening at dusk, trimmed the wick, "
    "polished the great lens and wrote the weather into the log before the lamp was lit. "
)


# Untimed passes before a width's timed ones: the first decodes of a new
# batch shape allocate compute buffers (and, on CUDA, capture a graph).
WARM_PASSES = 2


def prefix_tokens(ctx: Context, depth: int) -> list[int]:
    """``depth`` tokens of filler prose, the BOS first: what the timed rows
    attend to. Attention's cost depends on how many cells it reads, not on
    what they hold, so the filler repeats."""
    model = ctx.model
    piece = model.tokenize(_PREFIX_TEXT, add_special=False)
    head = model.tokenize(_PREFIX_TEXT * 8)
    copies = max(0, depth - len(head)) // max(1, len(piece)) + 1
    tokens = head + piece * copies
    return tokens[:depth]


def _at_depth(ctx: Context, widths: Sequence[int], depth: int) -> tuple[list[int], int]:
    """Filler rows for the widest width, and the cache reset with ``depth``
    tokens of filler decoded: (rows, the position the passes start at)."""
    rows = ctx.model.tokenize(_PREFIX_TEXT * 4, add_special=False)
    if len(rows) < max(widths):
        raise ValueError(f"widths up to {max(widths)} need more filler tokens than {len(rows)}")
    prefix = prefix_tokens(ctx, depth)
    ctx.reset()
    if prefix:
        ctx.decode(prefix, "last")
    return rows, ctx.n_past


def _timed_passes(ctx: Context, widths: Sequence[int], depth: int) -> Callable[[int], float]:
    """The cache reset and ``depth`` tokens of filler decoded; then a
    function that times one pass of w filler rows with logits for every row
    and rolls it back."""
    if depth + max(widths) > ctx.n_ctx:
        raise ValueError(f"n_ctx {ctx.n_ctx} cannot hold a KV depth of {depth} tokens and the widest width "
                         f"{max(widths)} (needs {depth + max(widths)})")
    rows, base = _at_depth(ctx, widths, depth)

    def one_pass(w: int) -> float:
        t0 = time.perf_counter()
        ctx.decode(rows[:w], "all")
        dt = time.perf_counter() - t0
        ctx.truncate(base)
        return dt

    return one_pass


def decode_pass_seconds(
    ctx: Context, widths: Sequence[int], inner: int = BLOCK_PASSES, order: str = "consecutive",
    depth: int = PREFIX_TOKENS,
) -> list[float]:
    """Median seconds of one verification pass of w rows, per width, with
    ``depth`` tokens in the KV cache before each pass.
    ``order``: "consecutive" (each width back to back, as a loop of one n_max)
    or "interleaved" (spreads slow drift, rebuilds a GPU graph each pass)."""
    check_order(order)
    one_pass = _timed_passes(ctx, widths, depth)
    seconds = median_pass_seconds(one_pass, widths, inner, order, WARM_PASSES)
    ctx.reset()
    return seconds


def switch_pass_seconds(ctx: Context, widths: Sequence[int], inner: int = INNER_PASSES,
                        depth: int = PREFIX_TOKENS) -> dict[str, Any]:
    """Median seconds of passes that change width, and of the pass after
    each (where CUDA captures its graph), per width above 1."""
    one_pass = _timed_passes(ctx, widths, depth)
    for _ in range(WARM_PASSES):
        one_pass(1)
    one = statistics.median(one_pass(1) for _ in range(inner))
    got: dict[str, list[float]] = {}
    for w in widths:
        if w < 2:
            continue
        for _ in range(WARM_PASSES):
            one_pass(w)
        back = statistics.median(one_pass(w) for _ in range(inner))
        after_one, one_after, second_w, second_one = [], [], [], []
        for _ in range(inner):
            one_after.append(one_pass(1))
            second_one.append(one_pass(1))
            after_one.append(one_pass(w))
            second_w.append(one_pass(w))
        got[str(w)] = [back, statistics.median(after_one), statistics.median(one_after),
                       statistics.median(second_w), statistics.median(second_one)]
    ctx.reset()
    return {"one_s": one, "widths": got}


# Passes of one width a cell's timing keeps in a row: its first ones and a steady tail.
CELL_PASSES = 8


def cell_pass_seconds(ctx: Context, widths: Sequence[int], passes: int = CELL_PASSES,
                      depth: int = PREFIX_TOKENS) -> dict[str, list[float]]:
    """Passes as a run's cell decodes them: after a pass of another shape,
    ``passes`` passes of w rows each keeping its rows; per width, each
    pass's seconds in order (widths the context cannot hold left out)."""
    rows, base = _at_depth(ctx, widths, depth)
    got: dict[str, list[float]] = {}
    for w in widths:
        n = min(passes, (ctx.n_ctx - base) // w)
        if n < 4:
            continue
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            ctx.decode(rows[:w], "all")
            times.append(time.perf_counter() - t0)
        ctx.truncate(base)
        got[str(w)] = times
    ctx.reset()
    return got


def batched_bench_binary() -> str:
    """llama-batched-bench: LAB_LLAMA_BATCHED_BENCH, else the tool lookup."""
    env = os.environ.get("LAB_LLAMA_BATCHED_BENCH")
    if env:
        return env
    found = find_llama_tool("llama-batched-bench")
    if found:
        return found[0]
    raise FileNotFoundError(f"{missing_tool_hint('llama-batched-bench')}; or set LAB_LLAMA_BATCHED_BENCH")


def parse_batched_bench(text: str) -> list[dict[str, float]]:
    """Rows of llama-batched-bench's output, Markdown table or JSONL, as
    dicts with pp, tg, pl, t_tg and speed_tg (aggregate generated tok/s)."""
    rows: list[dict[str, float]] = []
    header: list[str] | None = None
    names = {"PP": "pp", "TG": "tg", "B": "pl", "N_KV": "n_kv", "T_PP s": "t_pp", "S_PP t/s": "speed_pp",
             "T_TG s": "t_tg", "S_TG t/s": "speed_tg", "T s": "t", "S t/s": "speed"}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict) and "speed_tg" in obj and "pl" in obj:
                rows.append({k: float(obj[k]) for k in ("pp", "tg", "pl", "t_tg", "speed_tg") if k in obj})
            continue
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if "S_TG t/s" in cells:
            header = [names.get(c, c) for c in cells]
            continue
        if header is None or set("".join(cells)) <= set("-: "):
            continue
        try:
            values = [float(c) for c in cells]
        except ValueError:
            continue
        if len(values) == len(header):
            rows.append(dict(zip(header, values)))
    return rows


def pass_seconds_from_bench(rows: Sequence[dict[str, float]], widths: Sequence[int]) -> list[float]:
    """Seconds one decode of w rows took: w / aggregate generation tok/s."""
    by_pl = {int(r["pl"]): r for r in rows}
    missing = [w for w in widths if w not in by_pl]
    if missing:
        raise ValueError(f"llama-batched-bench gave no row for batch {missing}")
    return [w / by_pl[w]["speed_tg"] for w in widths]


def batched_bench_seconds(
    model_path: str, widths: Sequence[int], threads: int, npp: int = PREFIX_TOKENS, ntg: int = 32,
    binary: str | None = None, timeout_s: float = 600.0,
) -> tuple[list[float], dict[str, Any]]:
    """Run llama-batched-bench once over all widths; seconds per pass per
    width and what ran (command, parsed rows)."""
    exe = binary or batched_bench_binary()
    n_ctx = max(widths) * (npp + ntg) + 64
    cmd = [
        exe, "-m", model_path, "-c", str(n_ctx), "-b", "2048", "-ub", "512",
        "-npp", str(npp), "-ntg", str(ntg), "-npl", ",".join(str(w) for w in widths),
        # One shared prompt: generation is what is measured, and prompt
        # processing for 16 separate prompts would dominate the run.
        "-pps",
    ]
    if threads:
        cmd += ["-t", str(threads)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or "").strip().splitlines()[-5:])
        raise RuntimeError(f"llama-batched-bench exited {proc.returncode}: {tail}")
    rows = parse_batched_bench(proc.stdout + "\n" + proc.stderr)
    if not rows:
        raise RuntimeError("llama-batched-bench printed no table")
    return pass_seconds_from_bench(rows, widths), {"command": cmd, "rows": rows}
