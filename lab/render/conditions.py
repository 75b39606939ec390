"""What a comparison was measured under, checked from its rows before
anyone reads a speedup: one prompt text on every arm, a quiet machine,
plausible output, the server's own counts, and where asked the engine's
own tool beside the baselines."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from lab.analysis.reference import WARN_BELOW, ReferenceComparison, compare_references
from lab.base.verdict import failed_checks
from lab.rows.build import pick_baseline


def prompt_mismatches(results: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every speculative row whose prompt text differs from the one its
    baseline row was measured on."""
    out = []
    for r in results:
        if r.get("status") != "ok" or r.get("is_baseline") or not r.get("baseline_arm"):
            continue
        base = pick_baseline(results, r["baseline_arm"], r["prompt"], r["round"])
        mine, theirs = r.get("prompt_sha256"), base.get("prompt_sha256") if base else None
        if mine and theirs and mine != theirs:
            out.append({"arm": r["arm"], "prompt": r["prompt"], "round": r["round"], "baseline_arm": r["baseline_arm"],
                        "sha256": mine, "baseline_sha256": theirs, "template": r.get("prompt_template"),
                        "baseline_template": base.get("prompt_template") if base else None})
    return out


def prompt_lines(results: Sequence[Mapping[str, Any]]) -> list[str]:
    """The report's prompt check: the texts each prompt's arms sent (by hash
    and template), and a warning for a comparison across different prompts."""
    by_prompt: dict[str, dict[str, list[str]]] = {}
    templates: dict[str, set[str]] = {}
    for r in results:
        if r.get("status") != "ok" or not r.get("prompt_sha256") or int(r.get("round", 1)) < 1:
            continue
        sha = str(r["prompt_sha256"])
        arms = by_prompt.setdefault(r["prompt"], {}).setdefault(sha, [])
        if r["arm"] not in arms:
            arms.append(r["arm"])
        templates.setdefault(sha, set()).add(str(r.get("prompt_template") or "?"))
    if not by_prompt:
        return ["No row records the prompt it sent (a run saved before prompts were hashed)."]

    def made_by(sha: str) -> str:
        return " or ".join(sorted(templates[sha])) + f" template, sha256 {sha[:12]}"

    lines = []
    for prompt, texts in by_prompt.items():
        if len(texts) == 1:
            lines.append(f"- {prompt}: every arm sent the same text ({made_by(next(iter(texts)))})")
        else:
            parts = [f"{', '.join(arms)}: {made_by(sha)}" for sha, arms in texts.items()]
            lines.append(f"- {prompt}: ⚠ {len(texts)} different texts; " + "; ".join(parts))
    for m in prompt_mismatches(results):
        lines.append(
            f"- ⚠ {m['arm']} / {m['prompt']} r{m['round']} is compared with {m['baseline_arm']} across different "
            f"prompts (sha256 {m['sha256'][:12]} vs {m['baseline_sha256'][:12]}): its speedup and greedy "
            "equivalence compare different work"
        )
    lines += _fallback_lines(results)
    return lines


def _fallback_lines(results: Sequence[Mapping[str, Any]]) -> list[str]:
    """A warning per arm whose model has no chat template: the lab used its
    ChatML fallback (lab.kit.prompting.FALLBACK) for it."""
    from lab.kit.prompting import FALLBACK

    seen: dict[str, Any] = {}
    for r in results:
        if r.get("prompt_template") == FALLBACK:
            seen.setdefault(str(r["arm"]), r.get("model"))
    return [f"- ⚠ {arm}: its model{f' ({model})' if model else ''} has no chat template; the lab rendered its "
            "prompts with its ChatML fallback (`chat_template = false` sends the text as written)"
            for arm, model in seen.items()]


def output_lines(results: Sequence[Mapping[str, Any]]) -> list[str]:
    """The output check (lab.rows.output_check): each cell whose text loops or
    writes template markers, or a line saying none did."""
    flagged = [r for r in results if r.get("status") == "ok" and r.get("degenerate_output")]
    if not flagged:
        checked = sum(1 for r in results if r.get("status") == "ok" and r.get("text"))
        return [f"- every output checked ({checked} cells): no loop, no run of template markers"] if checked else []
    # one line per arm x prompt: the rounds that looped, and the first one's finding
    cells: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in flagged:
        cells.setdefault((r["arm"], r["prompt"]), []).append(r)
    lines = []
    for (arm, prompt), rows in cells.items():
        rounds = ", ".join(f"r{r['round']}" for r in rows)
        lines.append(f"- ⚠ {arm} / {prompt} {rounds}: {rows[0]['degenerate_output']}; its acceptance is not representative")
    return lines


def machine_lines(results: Sequence[Mapping[str, Any]], machine: Mapping[str, Any] | None = None) -> list[str]:
    """The noise guard: rows taken on a busy machine, or how quiet it was, and
    on a GPU the runs its process ran before."""
    return _noise_lines(results) + _thread_lines(machine or {}) + _process_lines(results, machine or {})


def _thread_lines(machine: Mapping[str, Any]) -> list[str]:
    """How ``[run] threads = 0`` was resolved as the run started."""
    t = machine.get("threads")
    if not isinstance(t, Mapping) or not all(isinstance(t.get(k), (int, float)) for k in ("used", "cores", "others_cores")):
        return []
    if t["used"] < t["cores"]:
        return [f"- threads = 0 ran with {t['used']} of {t['cores']} cores: other processes kept "
                f"{t['others_cores']:.2f} cores busy as the run started (set `threads` to override)"]
    return [f"- threads = 0 ran with all {t['cores']} cores (other processes: {t['others_cores']:.2f} busy as the run started)"]


def _process_lines(results: Sequence[Mapping[str, Any]], machine: Mapping[str, Any]) -> list[str]:
    before = machine.get("lab_runs_before")
    if not isinstance(before, int) or isinstance(before, bool) or before <= 0:
        return []
    if not any(r.get("gpu_name") for r in results):
        return []
    runs = "run" if before == 1 else "runs"
    return ["", f"⚠ This run used a GPU, and its process ran {before} lab {runs} before it. A baseline that "
            "directly follows another lab run in one process can decode a few percent slower on the device "
            "(results/h200-probe-process), which flatters every speedup against it; for reference figures run "
            "the profile with `lab run`, a process of its own."]


def _noise_lines(results: Sequence[Mapping[str, Any]]) -> list[str]:
    measured = [r for r in results if r.get("contention") is not None and int(r.get("round", 1)) >= 1]
    if not measured:
        ran = [r for r in results if r.get("status") not in ("cancelled", "skipped") and int(r.get("round", 1)) >= 1]
        if not ran:
            return ["No cell ran to the end (every one was cancelled or skipped): there was nothing to watch."]
        return ["The run did not watch the machine (saved before the noise guard)."]
    busy = [r for r in measured if r.get("contended")]
    if not busy:
        top = max(float(r["contention"]) for r in measured)
        return [f"Quiet: other processes used at most {top:.2f} cores during any cell."]
    lines = [
        f"⚠ {len(busy)} of {len(measured)} cells ran on a busy machine (or were compared with a baseline that did). "
        "A cell paired with its baseline's ran seconds from it, so the load moved both: its verdict stands where "
        "its paired rounds agree and reads uncertain where they do not; cells that ran minutes from their "
        "baseline's ([run] order = \"arms\") read uncertain. Verdicts \"at any load\" do not depend on it. "
        "Tok/s are this load's: run again on a quiet machine for a quiet machine's figures.",
        "",
    ]
    for r in busy:
        lines.append(f"- {r['arm']} / {r['prompt']} r{r['round']}: {r.get('contention_note') or 'busy'}")
    return lines


def count_check_lines(results: Sequence[Mapping[str, Any]]) -> list[str]:
    """The count cross-check: rows the server's own counters confirmed, each
    they contradict, and sources a row could not read ([] when none checked)."""
    checked = [r for r in results if r.get("status") == "ok" and int(r.get("round", 1)) >= 1
               and (r.get("engine_report") or {}).get("checks")]
    if not checked:
        return []
    failed = [r for r in checked if failed_checks(r)]
    names = sorted({k for r in checked for k in (r.get("engine_report") or {})["checks"]})
    if not failed:
        lines = [f"The server's own counts agree with the lab's on all {len(checked)} checked rows "
                 f"({', '.join(names)})."]
    else:
        lines = [f"⚠ On {len(failed)} of {len(checked)} checked rows the server's own counts differ from the "
                 "lab's: their steps, acceptance and step cost are not the server's.", ""]
        for r in failed:
            rep = r.get("engine_report") or {}
            lines.append(f"- {r['arm']} / {r['prompt']} r{r['round']}: failed {', '.join(failed_checks(r))}"
                         + (f" (slot counters via {_disagreeing(rep)})" if _disagreeing(rep) else ""))
    missing: dict[str, list[str]] = {}
    for r in checked:
        for what in (r.get("engine_report") or {}).get("checks_missing") or ():
            missing.setdefault(str(what), []).append(f"{r['arm']}/{r['prompt']} r{r['round']}")
    for what, cells in missing.items():
        shown = ", ".join(cells[:4]) + (f" and {len(cells) - 4} more" if len(cells) > 4 else "")
        lines.append(f"- missing: {what}, not checked on {shown}")
    return lines


def _disagreeing(report: Mapping[str, Any]) -> str:
    surfaces = report.get("slot_counter_surfaces") or {}
    return ", ".join(k for k, v in surfaces.items() if v is False)


def reference_lines(results: Sequence[Mapping[str, Any]], machine: Mapping[str, Any] | None) -> list[str]:
    """The reference check: each baseline beside the engine's own tool, a
    warning for one more than 3 % below it ([] when none was measured)."""
    lines = []
    for c in compare_references(results, machine):
        lines.append(f"- {c.arm}: {_reference_words(c)}")
        if c.command:
            lines.append(f"  ({c.when or 'measured'}{_rounds(c)}: `{c.command}`)")
        if c.note:
            lines.append(f"  note: {c.note}")
        if c.busy:
            lines.append(f"  ⚠ the machine was busy while the reference ran ({c.busy}): its figure is low, "
                         "and so is the comparison; run again on a quiet machine")
    for c in compare_references(results, machine):
        if c.below and c.ratio is not None:
            lines.append(
                f"- ⚠ {c.arm}: the lab's baseline decodes {(1 - c.ratio) * 100:.0f} % below {_tool(c)} "
                f"(more than {WARN_BELOW * 100:.0f} %): every absolute tok/s this stack shows in the run is likely "
                "low by about as much; speedups, a ratio of two figures of the same loop, less so")
    return lines


def _tool(c: ReferenceComparison) -> str:
    if c.tool == "llama-bench tg":
        return f"llama-bench tg {c.n_tokens}"
    return f"{c.tool} of {c.n_tokens} tokens"


def _rounds(c: ReferenceComparison) -> str:
    if not c.rounds:
        return ""
    return f"; the baseline's median of {c.rounds} round{'s' if c.rounds != 1 else ''} on {c.prompt}"


def _reference_words(c: ReferenceComparison) -> str:
    if c.error:
        return f"no reference ({c.tool}): {c.error}"
    ref = f"{c.tok_per_s:.1f} tok/s" if c.tok_per_s is not None else "no figure"
    if c.tool == "bare /completion":
        ref += ", the server's own predicted_per_second"
    if c.ratio is None or c.lab_tok_per_s is None:
        return f"{_tool(c)} {ref}; no ok row of the baseline to compare with"
    return f"baseline {c.lab_tok_per_s:.1f} tok/s = {c.ratio:.2f} of {_tool(c)} ({ref})"
