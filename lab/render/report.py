"""Reports of a saved run: Markdown shaped like the write-ups' tables, CSV of
every row, JSON as saved plus the analysis, always rendered from a run
directory (:class:`ReportWriter` as a run ends, ``lab report`` on demand);
:func:`load_for_report` adds steps and a probe where there are any, and
sections without them say what is missing."""

from __future__ import annotations

import csv
import io
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Mapping, Sequence

from lab.analysis import categories, comparable, lossless_loader, pass_kinds, stats
from lab.analysis import run as analysis
from lab.analysis.reference import compare_references
from lab.base import economics as breakeven
from lab.base import rundir
from lab.base.cells import STOPPED_STATUSES
from lab.base.events import RunEvent, RunFinished
from lab.base.row import COLD_FIRST_ROUND, CSV_KEYS
from lab.base.textsafe import printable
from lab.base.units import mib_from_bytes, ms_from_s, percent
from lab.base.verdict import ANY_LOAD, BUSY_WARNING, COUNTS_WARNING, busy_warning, counts_warning, judge
from lab.render import answer, conditions, divergence, probe_lines, serving, set_acceptance
from lab.render import categories as category_section
from lab.render import engines as engines_section
from lab.render import figure_data as fd
from lab.render import gpu as gpu_report
from lab.render import latency as latency_section
from lab.render import lossless as lossless_lines
from lab.render import memory as memory_section
from lab.render import rounds as rounds_section
from lab.render.sections import LEAD_FIGURES, heading
from lab.rows.shape import unreadable_lines


def _fmt(value: Any, spec: str = ".2f", none: str = "—") -> str:
    if value is None:
        return none
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return format(value, spec)
    return str(value)


def load_for_report(run_dir: str | Path, probe: str | Path | None = None) -> dict[str, Any]:
    """A run directory's results with its steps and probe attached: the
    probe named here, else probe.json in the run directory, else the one the
    profile names, else none."""
    from lab.base import probe as probes
    from lab.store import load_run, load_steps

    data = load_run(run_dir)
    p = Path(run_dir)
    data["lossless"] = lossless_loader.load(p)
    unreadable: list[str] = list(data.get("unreadable") or [])
    if p.is_dir():
        # steps of a cell without an ok row were never part of a result
        ok_cells = {(r.get("arm"), r.get("prompt"), r.get("round")) for r in data["results"] if r.get("status") == "ok"}
        data["steps"] = [s for s in load_steps(p, unreadable) if (s.get("arm"), s.get("prompt"), s.get("round")) in ok_cells]
    named_by_run = False
    if probe is None:
        # a probe named under [run] is relative to the profile's directory
        named = (data["profile"].get("run") or {}).get("probe") or data["profile"].get("probe")
        # true / false switch the run's own probe on and off: not a file
        if isinstance(named, str) and named and p.is_dir() and not rundir.exists(p / probes.PROBE_FILE):
            where = Path(str(data["profile"].get("path") or ".")).parent
            probe = where / str(named)
            named_by_run = True
    if probe is not None and named_by_run:
        # the saved run names it: a probe gone since costs the prediction only
        try:
            data["probe"] = probes.load(probe)
        except (OSError, ValueError, RecursionError) as exc:
            unreadable.append(f"probe {probe} named by the run not used ({exc})")
            data["probe"] = None
    elif probe is not None:
        data["probe"] = probes.load(probe)
    elif p.is_dir():
        # a run probes every stack that speculates: probe.json, probe-2.json...
        try:
            data["probes"] = probes.find_all(p)
        except (OSError, ValueError, RecursionError) as exc:
            # a damaged probe costs the prediction, not the report
            unreadable.append(f"{p}: probe not used ({exc})")
            data["probes"] = []
        data["probe"] = data["probes"][0] if data["probes"] else None
    if unreadable:
        data["unreadable"] = unreadable
    if p.is_dir():
        from lab.render import figures

        drawn = figures.existing(p)
        if drawn is not None:
            data["figure_lines"] = figures.markdown_lines(drawn)
    return data


# What report.md says of its figures until they are drawn: written first, so
# that a drawing which never comes back leaves a report that says so.
FIGURES_PENDING = ["Drawn after this report is written, in a process of their own, and linked here when done. "
                   "If this line stays, that drawing did not finish: `lab report RUN_DIR --figures` draws them."]


def write_report(run_dir: str | Path, data: Mapping[str, Any] | None = None, figures: bool = True) -> Path:
    """Render a run directory's report.md from what it saved, with its steps
    and any probe attached (so the per-position acceptance and the
    prediction are in it too); then, with ``figures``, draw its figures and
    write it again with them (:func:`add_figures`). Without, the caller
    adds them when it is ready."""
    shown = load_for_report(run_dir) if data is None else data
    path = _write_markdown(run_dir, {**shown, "figure_lines": FIGURES_PENDING})
    if figures:
        add_figures(run_dir, shown)
    return path


def add_figures(run_dir: str | Path, data: Mapping[str, Any]) -> str | None:
    """Draw the run's figures (in a process of their own: a crash or a hang
    there costs the figures only) and write report.md again with its
    Figures section; what went wrong, in a line, or None."""
    lines, stopped = _figures(run_dir, data)
    try:
        _write_markdown(run_dir, {**data, "figure_lines": lines})
    except OSError as exc:
        return f"report.md not written again with its figures: {exc.strerror or exc}"
    return f"figures: {stopped}; report.md says which were not drawn" if stopped else None


def _write_markdown(run_dir: str | Path, data: Mapping[str, Any]) -> Path:
    path = Path(run_dir) / rundir.REPORT_FILE
    # a report is read with cat as often as in an editor: whatever a server or
    # a saved run put in it (escape sequences, OSC 52) is written escaped
    text = printable(render_markdown(data), keep="\n\t")
    # whole or not at all: written again with its figures, the report without them stays if this fails
    from lab.store import FILE_MODE

    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(handle, FILE_MODE)
        with os.fdopen(handle, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def write_figures(run_dir: str | Path, data: Mapping[str, Any]) -> list[str]:
    """Draw the run's figures beside its report (:mod:`lab.render.draw`)
    and return the report's Figures section; figures that cannot be drawn
    cost themselves, never report.md."""
    return _figures(run_dir, data)[0]


def _figures(run_dir: str | Path, data: Mapping[str, Any]) -> tuple[list[str], str | None]:
    from lab.render import draw, figures

    try:
        out = draw.write(run_dir, data)
    except OSError as exc:
        why = f"they could not be written in {run_dir} ({exc.strerror or exc})"
        return [f"No figures: {why}."], why
    except Exception as exc:  # noqa: BLE001 - figures are never worth losing report.md
        why = f"drawing failed ({type(exc).__name__}: {str(exc)[:200]})"
        return [f"No figures: {why}."], why
    return figures.markdown_lines(out), out.stopped


def write_acceptance(run_dir: str | Path, data: Mapping[str, Any] | None = None) -> Path | None:
    """The run's portable acceptance profile (acceptance.json), when any
    speculative arm saved steps: carried to another machine, `lab predict`
    prices it with that machine's probe."""
    from lab.analysis import acceptance_file

    if data is None:
        data = load_for_report(run_dir)
    if data.get("steps") is None:
        return None
    profile = acceptance_file.build(data, Path(run_dir).name)
    if not profile["entries"]:
        return None
    return acceptance_file.save(profile, Path(run_dir) / acceptance_file.ACCEPTANCE_FILE)


class ReportWriter:
    """A listener of a run that writes report.md and acceptance.json when it
    ends, where the store is now (subscribe it after the store), then draws
    the figures and writes report.md again with them; with
    ``figures_later`` the caller draws them with :meth:`add_figures` when it
    is ready (`lab run` prints its summary first). A report that cannot be
    written leaves its reason in ``error``."""

    def __init__(self, store: Any = None, figures_later: bool = False) -> None:
        self.store = store
        self.figures_later = figures_later
        self.error: str | None = None
        self._written: tuple[str, Mapping[str, Any]] | None = None

    def __call__(self, event: RunEvent) -> None:
        if not isinstance(event, RunFinished):
            return
        run_dir = str(self.store.path) if self.store is not None else event.run_dir
        if not run_dir or getattr(self.store, "memory_only", False):
            return
        try:
            data = load_for_report(run_dir)
            write_report(run_dir, data, figures=False)
        except OSError as exc:
            self.error = f"report.md not written in {run_dir}: {exc.strerror or exc}"
            return
        except Exception as exc:  # noqa: BLE001 - a results file it refuses (too large, damaged) is said, not raised
            self.error = f"report.md not written in {run_dir}: {type(exc).__name__}: {exc}"
            return
        self._written = (run_dir, data)
        try:
            write_acceptance(run_dir, data)
        except OSError as exc:
            self.error = f"acceptance.json not written in {run_dir}: {exc.strerror or exc}"
        except ValueError as exc:
            self.error = f"acceptance.json not written in {run_dir}: {exc}"
        if not self.figures_later:
            self.add_figures()

    def add_figures(self) -> str | None:
        """Draw the figures of the report written at the run's end and write
        it again with them (:func:`add_figures`); what went wrong, in a line,
        or None (also when there was no report to add them to)."""
        if self._written is None:
            return None
        run_dir, data = self._written
        self._written = None
        return add_figures(run_dir, data)


def _probe(data: Mapping[str, Any]) -> Any:
    from lab.base import probe as probes

    value = data.get("probe")
    if value is None or isinstance(value, probes.Probe):
        return value
    return probes.Probe.from_json(value)


# -- Markdown -------------------------------------------------------------------

# a figure's link as lab.render.figures.markdown_lines writes it
_FIGURE_LINK = re.compile(r"^- \[(?P<title>[^\]]*)\]\((?P<path>[^)\s]*/(?P<name>[\w-]+)\.(?:svg|png))\)")


def _lead_figures(figure_lines: Sequence[str]) -> list[str]:
    """The figures the answer is read with, shown inline where they were drawn."""
    drawn = {}
    for line in figure_lines:
        m = _FIGURE_LINK.match(line)
        if m:
            drawn[m.group("name")] = f"![{m.group('title')}]({m.group('path')})"
    return [drawn[name] for name in LEAD_FIGURES if name in drawn]


def _answer_lines(data: Mapping[str, Any], results: Sequence[Mapping[str, Any]],
                  summaries: Sequence[Mapping[str, Any]]) -> list[str]:
    """The report's opening: one sentence per stack (lab.render.answer), how
    the cells ran, then the speedup and T(w) figures."""
    lines = [heading("answer"), ""]
    lines += [f"- {s}" for s in answer.sentences(results, summaries)]
    order = answer.order_line(data.get("order"))
    lines += ["", order] if order else []
    figures = _lead_figures(data.get("figure_lines") or ())
    lines += ["", *figures] if figures else []
    return lines + [""]

def _writeup_table(results: Sequence[Mapping[str, Any]], summaries: Sequence[Mapping[str, Any]],
                   not_comparable: bool = False) -> list[str]:
    """Arms down, prompts across, every round's tok/s and the change against
    the baseline: the write-ups' results table. ``not_comparable``: the run
    is not a quiet machine's (:mod:`lab.analysis.comparable`), and every
    speculative verdict says so."""
    prompts: list[str] = []
    arms: list[str] = []
    for r in results:
        if r["prompt"] not in prompts:
            prompts.append(r["prompt"])
        if r["arm"] not in arms:
            arms.append(r["arm"])
    by = {(s["arm"], s["prompt"]): s for s in summaries}
    drifted = rounds_section.flagged(results)
    # the cells hold one tok/s per round: the header says which is which
    n_rounds = max((int(r["round"]) for r in results if isinstance(r.get("round"), int) and r["round"] >= 1), default=1)
    per_round = "tok/s " + (" / ".join(f"r{i}" for i in range(1, n_rounds + 1)) if n_rounds > 1 else "r1")
    head = ("| arm | " + " | ".join(f"{p}: {per_round} (change vs baseline)" for p in prompts)
            + f" | acceptance ({' / '.join(prompts)}) | verdict |")
    lines = [head, "|" + "---|" * (len(prompts) + 3)]
    for arm in arms:
        cells = []
        kinds = []
        for prompt in prompts:
            s = by.get((arm, prompt))
            rounds = sorted((r for r in results if r["arm"] == arm and r["prompt"] == prompt and int(r["round"]) >= 1),
                            key=lambda r: r["round"])
            if s is None or not rounds:
                cells.append("—")
                continue
            if s["rounds"] == 0:
                cells.append(s["status"])
            else:
                tps = " / ".join(f"{r['tok_per_s']:.2f}" if r["status"] == "ok" and r["tok_per_s"] else r["status"] for r in rounds)
                if s["speedup"] is not None:
                    tps += f" ({(s['speedup'] - 1) * 100:+.0f}%)"
                cells.append(tps)
            # a loop in the output makes acceptance easy: the headline says so too
            looped = any(r.get("status") == "ok" and r.get("degenerate_output") for r in rounds)
            kind = s["verdict_kind"] + (f" {ANY_LOAD}" if s.get("verdict_any_load") else "")
            kinds.append((prompt, kind + (" (degenerate output)" if looped else "")))
        accept = " / ".join(percent(by[(arm, p)]["acceptance_rate"]) if (arm, p) in by else "—" for p in prompts)
        first = next((by[(arm, p)] for p in prompts if (arm, p) in by), None)
        if first is not None and first["is_baseline"]:
            accept, verdict = "—", "baseline"
        elif len({k for _, k in kinds}) == 1:
            verdict = kinds[0][1]
        else:
            verdict = "; ".join(f"{p}: {k}" for p, k in kinds)
        if first is not None:
            verdict += set_acceptance.verdict_mark(first)
        if any(busy_warning(by[(arm, p)]) for p in prompts if (arm, p) in by):
            verdict += f" {BUSY_WARNING}"
        elif not_comparable and first is not None and not first["is_baseline"]:
            verdict += " ⚠ not comparable"
        if any(counts_warning(by[(arm, p)]) for p in prompts if (arm, p) in by):
            verdict += f" {COUNTS_WARNING}"
        if arm in drifted:
            verdict += f" {rounds_section.NOT_REPEATS}"
        lines.append(f"| {arm} | " + " | ".join(cells) + f" | {accept} | {verdict} |")
    return lines


def _detail_table(summaries: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = [
        "| arm | prompt | tok/s (min–max) | speedup (rounds) [95% interval] | acceptance | mean len | draft ms | verify ms | "
        "step cost / max yield | break-even len | peak mem | identical | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        tps = _fmt(s["tok_per_s"], ".1f")
        if s["tok_per_s_min"] is not None and s["rounds"] > 1:
            tps += f" ({s['tok_per_s_min']:.1f}–{s['tok_per_s_max']:.1f})"
            if s["spread_too_wide"]:
                tps += " ⚠"
        speed = speedup_words(s)
        cost = "—" if s["step_cost_tokens"] is None else f"{s['step_cost_tokens']:.2f} / {_fmt(s['max_yield'], 'd')}"
        ident = _fmt(s["identical_to_baseline"])
        if s["first_divergence_char"] is not None:
            ident += f" (char {s['first_divergence_char']})"
        if COLD_FIRST_ROUND in (s.get("identity_reference") or ()):
            ident += " (r1 against its baseline, later rounds against its cold first round)"
        lines.append(
            f"| {s['arm']} | {s['prompt']} | {tps if s['rounds'] else s['status']} | {speed} | "
            f"{percent(s['acceptance_rate'])} | {_fmt(s['mean_accepted_len'])} | {ms_from_s(s['draft_s'], '.2f')} | "
            f"{ms_from_s(s['verify_s'], '.2f')} | {cost} | {_fmt(s['break_even_len'])} | {mib_from_bytes(s['peak_mem_bytes'])} | "
            f"{ident} | {' '.join(x for x in (s['verdict'], busy_warning(s), counts_warning(s)) if x)} |"
        )
    return lines


def _economics_lines(summaries: Sequence[Mapping[str, Any]]) -> list[str]:
    """The write-ups' hand arithmetic, one line per speculative arm x prompt."""
    lines = []
    for s in summaries:
        econ = breakeven.economics(s)
        if s["is_baseline"] or econ is None:
            continue
        split = ""
        if s["draft_s"] is not None and s["verify_s"] is not None:
            split = f" (draft {s['draft_s'] * 1000:.2f} + verify {s['verify_s'] * 1000:.2f})"
        need = econ.needed_acceptance
        need_txt = "" if need is None else (
            f", which needs {need * 100:.0f}% acceptance" if need <= 1 else ", more than any acceptance can give"
        )
        lines.append(
            f"- **{s['arm']} / {s['prompt']}**: a step takes {econ.step_s * 1000:.2f} ms{split} while a baseline token "
            f"takes {econ.baseline_token_s * 1000:.2f} ms, so a step costs {econ.cost_tokens:.2f} tokens and can land "
            f"at most {_fmt(econ.max_yield, 'd')}; it landed {_fmt(econ.mean_accepted_len)}. Break-even is "
            f"{econ.break_even_len:.2f} tokens per step{need_txt}. → {s['verdict_kind']}"
        )
    return lines


# the two per-position measures, labelled as the acceptance figure labels them
CONDITIONAL_LABEL = fd.CONDITIONAL_LABEL
UNCONDITIONAL_LABEL = fd.UNCONDITIONAL_LABEL


def _position_lines(data: Mapping[str, Any]) -> list[str]:
    steps = data.get("steps")
    if steps is None:
        return ["Per-position acceptance needs the run's steps.jsonl: render with `lab report RUN_DIR`."]
    pos = analysis.positions(steps)
    if not pos:
        return ["No speculative steps were saved."]
    width = max(len(p.reached) for p in pos.values())
    head = "| arm | prompt | measure | " + " | ".join(f"pos {i + 1}" for i in range(width)) + " |"
    lines = [head, "|---|---|---|" + "---|" * width]
    for (arm, prompt), p in pos.items():
        cond, uncond = [], []
        for i in range(width):
            if i < len(p.reached) and p.reached[i]:
                cond.append(f"{p.accepted[i] / p.reached[i] * 100:.0f}% of {p.reached[i]}")
                uncond.append(percent(p.unconditional[i], '.0f'))
            else:
                cond.append("—")
                uncond.append("—")
        lines.append(f"| {arm} | {prompt} | {CONDITIONAL_LABEL} | " + " | ".join(cond) + " |")
        lines.append(f"| {arm} | {prompt} | {UNCONDITIONAL_LABEL} | " + " | ".join(uncond) + " |")
    lines += [
        "",
        "Conditional at position i: drafts kept at i over the steps that reached i (every earlier position kept), "
        "\"of N\" the steps that reached it; the prediction multiplies these. Unconditional at position i: drafts "
        "kept at i over every step that drafted, the chance a step keeps at least i drafts; it is the "
        "\"per-position acceptance\" llama.cpp and vLLM print, and it falls with i even when every position "
        "is as easy as the first.",
    ]
    return lines


def _probes(data: Mapping[str, Any], probe: Any) -> list[Any]:
    from lab.base import probe as probes

    many = [v if isinstance(v, probes.Probe) else probes.Probe.from_json(v) for v in data.get("probes") or ()]
    return many or ([probe] if probe is not None else [])


def _prediction_lines(data: Mapping[str, Any], probe: Any) -> list[str]:
    if probe is None:
        off = (data["profile"].get("run") or {}).get("probe") is False
        if off:
            return ["No prediction: this profile turned the probe off (`[run] probe = false`)."]
        return [
            "No verify-cost probe for this run, so no prediction. Measure one with "
            "`lab probe --backend BACKEND --model MODEL --out RUN_DIR/probe.json`, or name one with "
            "`lab report RUN_DIR --probe FILE`."
        ]
    steps = data.get("steps")
    if steps is None:
        return ["The prediction needs the run's steps.jsonl (acceptance per position): render with `lab report RUN_DIR`."]
    pool = _probes(data, probe)
    preds = analysis.predicted_for_rows(data["results"], steps, pool)
    lines = []
    for pr in pool:
        # a step-priced probe's T(8) is a whole step of 7 drafts, not a batch of 8 rows
        ratio = None if pr.prices_steps else pr.batch_ratio()
        n = len(pr.seconds)
        lines.append(
            f"- probe: {pr.origin_line(verdict=False)}; it ran before the arms, apart from their timing. "
            f"{pr.backend} / {pr.model} by {pr.method}, {n} repeat{'s' if n != 1 else ''}"
            + (f"; batch-8/batch-1 {ratio[1]:.2f}x" if ratio else "")
            + "; T(w) " + ", ".join(f"{w}: {pr.t_ratio(w):.2f}" for w in pr.widths if w in (1, 2, 4, 5, 8, 16))
            + _deeper_words(pr)
            + (f"; priced by {pr.priced_by}: whole steps that drafted w - 1 tokens and kept them all, "
               "the draft's cost inside" if pr.prices_steps else "")
            + _kept_none_words(pr)
            + (f"; {pr.notes['streams']} streams at once, each step of every stream keeping all its drafts"
               if isinstance(pr.notes.get("streams"), int) and pr.notes["streams"] > 1 else "")
            + (f"; prices {', '.join(map(str, pr.origin['arms']))}" if pr.origin.get("arms") else "")
            + probe_lines.trust_clause(pr) + "."
        )
    lines.append("")
    if not preds:
        return lines + (probe_lines.untrusted_line(pool) or ["No speculative arm with steps to predict."])
    lines += [
        "| arm | prompt | n_max | measured | predicted (error) | held out (error) | best n_max | predicted there | curve (n_max: speedup) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in preds:
        curve = ", ".join(
            f"{c['n_max']}: {c['speedup']:.2f}" + ("*" if c["extrapolated"] else "")
            for c in p["curve"] if c["n_max"] <= 8 or c["n_max"] == p["best_n_max"]
        )
        other = "" if p["probe_matches"] else " †"
        lines.append(
            f"| {p['arm']}{other} | {p['prompt']} | {_fmt(p['n_max'], 'd')} | "
            f"{_fmt(p['measured'])}{'x' if p['measured'] is not None else ''} | "
            f"{_predicted(p['predicted'], p['measured'])}{_caveat_tags(p)} | {_held_out(p)} | {_fmt(p['best_n_max'], 'd')}"
            f"{'*' if p.get('best_extrapolated') else ''} | "
            f"{_fmt(p['best_predicted'])}x | {curve} |"
        )
    notes = (_caveat_notes(preds) + _t1_notes(data["results"], preds, pool) + _drift_notes(data.get("steps") or (), preds)
             + _switch_notes(preds) + _pass_kind_notes(data["results"], steps, pool) + _cell_notes(preds)
             + _catch_up_notes(preds) + _replay_notes(preds) + probe_lines.verify_gap_lines(preds))
    if notes:
        lines += [""] + notes
    lines += [
        "",
        "Predicted: expected tokens per step from the acceptance per position over a step's cost, "
        "T(n_max + 1) plus the drafter's measured seconds per drafted token and the loop's own measured "
        "seconds per step (where the backend reports them), in baseline tokens. From the row itself: its "
        "acceptance per position, draft and loop seconds and, on a probe of two depths, the KV depth T(w) is read "
        "at; from its baseline's rows: the seconds per token; from the probe: T(w). "
        "\\* marks n_max beyond the positions measured (the last position's acceptance carried on): "
        "a best n_max so marked is where to measure next, not a finding. "
        "Held out: made before the row ran, from nothing of its own: acceptance per position from its set rates "
        "or from another arm of the same drafter (named), draft and loop seconds from the drafter's other arms, "
        "T(w) from the probe; — where the run has no other arm to take them from."
        + (" Arms priced by a server (" + ", ".join(sorted({p["arm"] for p in preds if p.get("step_priced")}))
           + "): the step's cost is the server's own seconds of a step that drafted n_max tokens (draft and "
           "loop inside) over its baseline's seconds per token: T(n_max + 1), a step that kept them all, or, "
           "where the probe also timed steps that kept none, the line between the two read at the share of "
           "its drafts a step keeps on average (the server does work per token it keeps)."
           if any(p.get("step_priced") and p["probe_matches"] for p in preds) else "")
        + (" † the probe measured another stack than this arm runs (another backend, model or options), "
           "so its figures price another engine's steps." if any(not p["probe_matches"] for p in preds) else ""),
    ]
    return lines


def _deeper_words(pr: Any) -> str:
    """A probe of two KV depths: its second curve, and how rows read it."""
    span = pr.depth_span
    if span is None:
        return ""
    shown = ", ".join(f"{w}: {pr.t_ratio_at(w, span[1]):.2f}" for w in pr.widths if w in (2, 4, 5, 8, 16))
    return (f" at KV depth {span[0]}, {shown} at {span[1]}; each row's T(w) read at its own mean depth (its "
            "prompt plus half its output), linear between the two")


_NOTED = ("depth", "clocks", "draft drift")


def _caveat_tags(p: Mapping[str, Any]) -> str:
    tags = [str(c[0]) for c in p.get("caveats") or ()]
    return f" ⚠ {', '.join(tags)}" if tags else ""


def _caveat_notes(preds: Sequence[Mapping[str, Any]]) -> list[str]:
    """⚠ per caveat (lab.analysis.caveats) that no other note words, naming the rows it holds for."""
    rows: dict[tuple[str, str], list[str]] = {}
    for p in preds:
        for tag, why in p.get("caveats") or ():
            if tag not in _NOTED:
                rows.setdefault((tag, why), []).append(f"{p['arm']} / {p['prompt']}")
    return [f"- ⚠ {', '.join(names)} ({tag}): {why}." for (tag, why), names in rows.items()]


def _switch_notes(preds: Sequence[Mapping[str, Any]]) -> list[str]:
    """A line per row whose passes switch width where the probe priced such
    passes: what that adds to a step at the row's own n_max."""
    out = []
    for p in preds:
        own = next((c for c in p.get("curve") or () if c.get("n_max") == p.get("n_max")), None)
        cost = float(own.get("switch_cost") or 0.0) if own else 0.0
        if own is not None and cost >= 0.005:
            total = own["verify_cost"] + own["draft_cost"] + own["loop_cost"] + cost
            out.append(f"- {p['arm']} / {p['prompt']}: its passes switch width (a step after a plain decode, a plain "
                       f"decode after a step), which the probe timed costing more than back to back (a GPU backend "
                       f"rebuilds its captured graph): {cost:.2f} of a step's {total:.2f} baseline tokens at n_max "
                       f"{p['n_max']}.")
    return out


# how the report names each kind of pass, for steps and for plain decodes
_STEP_KIND_WORDS = {"switch": "steps after a switch", "second": "the step after that", "steady": "steady steps"}
_PLAIN_KIND_WORDS = {"switch": "plain decodes after a step", "second": "the one after that", "steady": "steady"}


def _pass_kind_notes(results: Sequence[Mapping[str, Any]], steps: Sequence[Mapping[str, Any]],
                     pool: Sequence[Any]) -> list[str]:
    """A line per row whose passes switched width: each pass kind's cost
    beside the probe's (lab.analysis.pass_kinds)."""
    out = []
    # where the probe timed no switches (a CPU's: a switch costs nothing there) the figures stay in the JSON
    for row in (r for r in pass_kinds.pass_kinds(results, steps, pool) if r.probe_timed):
        parts = [_kind_figures(_STEP_KIND_WORDS, row.steps), _kind_figures(_PLAIN_KIND_WORDS, row.plain)]
        width = f", steps of {row.width} rows" if row.width is not None else ""
        out.append(f"- {row.arm} / {row.prompt}: passes by kind, this run against the probe (ms{width}): "
                   + "; ".join(part for part in parts if part) + ".")
    if out:
        out.append("- Passes by kind: a step's figure is the median of its verify seconds, a plain decode's the mean "
                   "of the engine's seconds, ×N how many there were; in brackets the probe's pass of the same kind "
                   "at the steps' width. A switch is a pass of another width than the one before (a GPU backend runs "
                   "it without its captured graph), the pass after it captures the new graph, and steady passes "
                   "replay it.")
    return out


def _kind_figures(words: Mapping[str, str], figures: Sequence[Any]) -> str:
    """One side of a pass-kind line: each kind's milliseconds, the probe's
    in brackets, and how many passes."""
    said = []
    for k in figures:
        probe = f" ({k.probe_s * 1000:.2f})" if k.probe_s is not None else " (not timed)"
        said.append(f"{words[k.kind]} {k.seconds * 1000:.2f}{probe} ×{k.passes}")
    return ", ".join(said)


def _cell_notes(preds: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line where the probe timed a cell's first passes and the
    predictions were made per cell: what those passes cost each arm."""
    priced = []
    for p in preds:
        own = next((c for c in p.get("curve") or () if c.get("n_max") == p.get("n_max")), None)
        if own is not None and (own.get("cell_start") or own.get("baseline_cell_start")):
            priced.append(f"{p['arm']} / {p['prompt']} {float(own['cell_start']):.1f} "
                          f"(its baseline {float(own['baseline_cell_start']):.1f})")
    if not priced:
        return []
    return ["- A cell's first passes, right after its prompt, cost more than the steady ones (a GPU backend "
            "runs a new graph, then captures it), in the baseline's cells too; the probe timed them, and these "
            "predictions are per cell of the row's length. Baseline tokens a cell pays for them: "
            + "; ".join(priced) + "."]


def _catch_up_notes(preds: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line where a draft's catch-up after steps that kept all was
    seen and priced: what it adds to a step at each row's own n_max."""
    priced = []
    for p in preds:
        own = next((c for c in p.get("curve") or () if c.get("n_max") == p.get("n_max")), None)
        cost = float(own.get("catch_up_cost") or 0.0) if own else 0.0
        if cost >= 0.005:
            priced.append(f"{p['arm']} / {p['prompt']} {cost:.2f}")
    if not priced:
        return []
    return ["- A draft model reads what the target kept before it drafts: two tokens after a step that kept all "
            "its drafts, one otherwise. The steps show the first kind drafting dearer, and every prediction "
            "prices it at its n_max by the chance a step keeps all (the held-out one at the arm's own "
            "acceptance, from the other arms' steps). Baseline tokens a step at the row's n_max: "
            + "; ".join(priced) + "."]


def _replay_notes(preds: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line where a held-out prediction re-priced a recurrent target's
    re-runs after a rejection (lab.analysis.holdout.replay_tokens)."""
    shown = [f"{p['arm']} / {p['prompt']} {p['held_out_replays'][0]:.2f} → {p['held_out_replays'][1]:.2f}"
             for p in preds if p.get("held_out_replays")]
    if not shown:
        return []
    return ["- The target has recurrent layers: a step that rejected a draft restores their state and re-runs "
            "the tokens it kept, one pass inside the loop's seconds that grows with what the step keeps. A "
            "held-out prediction takes the other arms' re-runs out of their loop seconds and puts in its own, "
            "each priced by the probe; baseline tokens a step, the other arms' → this arm's at its acceptance: "
            + "; ".join(shown) + "."]


def _error(predicted: float | None, measured: float | None) -> str:
    if predicted is None or not measured:
        return ""
    return f" ({(predicted / measured - 1) * 100:+.0f}%)"


def _predicted(predicted: float | None, measured: float | None) -> str:
    if predicted is None:
        return "—"
    return f"{predicted:.2f}x{_error(predicted, measured)}"


def _held_out(p: Mapping[str, Any]) -> str:
    value = p.get("held_out")
    if value is None:
        return "—"
    source = p.get("held_out_acceptance_from")
    where = "set rates" if source == "set rates" else f"acceptance of {source}"
    return f"{value:.2f}x{_error(value, p.get('measured'))}, {where}"


def _kept_none_words(pr: Any) -> str:
    """The step-priced probe's steps that kept none of their drafts, in
    baseline tokens beside T(w), where it timed them."""
    shown = [(w, pr.kept_none_ratio(w)) for w in pr.widths if w in (2, 4, 5, 8, 16)]
    got = [f"{w}: {t:.2f}" for w, t in shown if t is not None]
    return f"; a step that kept none, {', '.join(got)}" if got else ""


def _t1_notes(results: Sequence[Mapping[str, Any]], preds: Sequence[Mapping[str, Any]], pool: Sequence[Any]) -> list[str]:
    """⚠ beside each prediction whose probe disagrees with its row in T(1)
    or KV depth (lab.analysis.predict)."""
    from lab.analysis.predict import depth_disagreement, probe_for, t1_disagreement

    # one line per disagreement, naming every arm it touches: the same probe
    # against the same baseline says the same thing for each of them
    notes: dict[str, list[str]] = {}
    for p in preds:
        rows = [r for r in results if r["arm"] == p["arm"] and r["prompt"] == p["prompt"]]
        base_arm = rows[0].get("baseline_arm") if rows else None
        if not base_arm:
            continue
        probe, _ = probe_for(rows[0], pool)
        if probe is None:
            continue
        base = [r for r in results if r["arm"] == base_arm and r["prompt"] == p["prompt"]]
        # a row far from the probe's depth has a slower (or faster) baseline token
        # for that reason: the depth is the note, not two clocks that disagree
        note = depth_disagreement(rows, probe) or t1_disagreement(base, probe)
        if note:
            notes.setdefault(f"{p['prompt']}: {note}", []).append(p["arm"])
    return [f"- ⚠ {', '.join(arms)} / {key}." for key, arms in notes.items()]


def _drift_notes(steps: Sequence[Mapping[str, Any]], preds: Sequence[Mapping[str, Any]]) -> list[str]:
    """⚠ per arm whose draft ran at different speeds from cell to cell
    (lab.analysis.predict.draft_drift)."""
    from lab.analysis.predict import draft_drift

    out = []
    for arm in dict.fromkeys(p["arm"] for p in preds):
        note = draft_drift(steps, arm)
        if note:
            out.append(f"- ⚠ {arm}: {note}.")
    return out


def _prediction_or_why(data: Mapping[str, Any], probe: Any) -> list[str]:
    """The prediction, or one line saying why there is none: a probe whose
    figures the arithmetic cannot take costs the prediction, not the report."""
    try:
        return _prediction_lines(data, probe)
    except (ArithmeticError, ValueError, TypeError) as exc:
        return [f"No prediction: the probe could not be used ({type(exc).__name__}: {str(exc)[:200]})."]


def speedup_words(s: Mapping[str, Any]) -> str:
    """A cell's speedup as every section gives it: the median of its paired
    rounds, then the rounds' own values where they are too few for an
    interval, or the interval where they are not."""
    if s["speedup"] is None:
        return "—"
    out = f"{s['speedup']:.2f}x"
    values = s.get("speedups") or []
    if s.get("speedup_ci"):
        out += f" [{s['speedup_ci'][0]:.2f}–{s['speedup_ci'][1]:.2f}]"
    elif 1 < len(values) < stats.MIN_T_PAIRS:
        out += f" ({' / '.join(f'{x:.2f}' for x in values)})"
    return out


def _stats_lines(summaries: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = []
    for s in summaries:
        if s["is_baseline"]:
            if s["spread_too_wide"]:
                lines.append(f"- {s['arm']} / {s['prompt']}: baseline rounds spread {s['tok_per_s_spread'] * 100:.0f}% ⚠")
            continue
        if s["call"] is None or s["rounds"] == 0:
            continue
        if s["warm"]:
            lines.append(rounds_section.warm_trend_line(s))
            continue
        values = s.get("speedups") or []
        spread = ""
        if s["tok_per_s_spread"] is not None and s["rounds"] > 1:
            spread = f"; rounds spread {s['tok_per_s_spread'] * 100:.0f}%" + (" ⚠" if s["spread_too_wide"] else "")
        if not values:
            lines.append(f"- {s['arm']} / {s['prompt']}: {_fmt(s['speedup'], '.2f')}x, no round paired with its "
                         f"baseline's: {s['call']}{spread}")
        elif len(values) == 1:
            lines.append(f"- {s['arm']} / {s['prompt']}: {values[0]:.2f}x from one paired round, no interval{spread}")
        elif s["speedup_ci"]:
            lines.append(f"- {s['arm']} / {s['prompt']}: {s['speedup']:.2f}x, median of {len(values)} paired rounds "
                         f"({', '.join(f'{x:.2f}' for x in values)}); 95% t-interval "
                         f"{s['speedup_ci'][0]:.2f}–{s['speedup_ci'][1]:.2f}: {s['call']}{spread}")
        else:
            lines.append(f"- {s['arm']} / {s['prompt']}: {s['speedup']:.2f}x, median of {len(values)} paired rounds "
                         f"({', '.join(f'{x:.2f}' for x in values)}), too few for an interval: {s['call']}{spread}")
    lines += [
        "",
        "A cell's speedup, in every section of this report, is the median of its paired speedups: each round's "
        "tok/s over its baseline's of the same prompt and round (warmup excluded). From "
        f"{stats.MIN_T_PAIRS} pairs up an interval follows it: the 95% t-interval of the paired log-ratios' mean, "
        "exp(mean ± t·s/√n); fewer pairs show their own values instead. ⚠: tok/s spread over rounds above 10%.",
    ]
    return lines


def _divergence_lines(results: Sequence[Mapping[str, Any]]) -> list[str]:
    divs = analysis.divergences(results)
    if not divs:
        checked = any(r.get("identical_to_baseline") is not None for r in results)
        lines = ["Every speculative output is identical to its baseline." if checked else "No outputs to compare."]
        if any(r.get("identity_reference") == COLD_FIRST_ROUND for r in results):
            lines = ["Every speculative output is identical to what it is held to: round 1 to its baseline, a "
                     "later warm round against its cold first round (its arm's round 1 of the prompt)."]
        if any(r.get("set_acceptance") for r in results):
            lines.append("Arms with set acceptance are not compared: their output is not the target's.")
        return lines
    return divergence.markdown_lines(divs, results)


def _left_behind_lines(reports: Any) -> list[str]:
    """What each arm's plugins left once closed (lab.telemetry.leftovers)."""
    from lab.telemetry.leftovers import Leftovers

    if not isinstance(reports, Mapping):
        return []
    return [f"- **{arm}**: {printable(Leftovers.line(r['left_behind']))}" for arm, r in reports.items()
            if isinstance(r, Mapping) and isinstance(r.get("left_behind"), Mapping)]


def render_markdown(data: Mapping[str, Any]) -> str:
    profile = data["profile"]
    run = profile.get("run", {})
    results = data["results"]
    summaries = analysis.summarize(results, analysis.ran_paired(data))
    probe = _probe(data)
    lines = [f"# {profile['name']}", ""] + unreadable_lines(data)
    lines += _answer_lines(data, results, summaries)
    lines += [heading("results"), ""]
    if profile.get("description"):
        lines += [profile["description"], ""]
    lines += [
        f"Greedy: {'yes' if not run.get('temperature') else 'no (T=' + str(run.get('temperature')) + ')'}, "
        f"{run.get('max_tokens')} tokens, {run.get('rounds')} rounds after {run.get('warmup')} warmup. "
        f"Started {data.get('started')}" + (" (cancelled)" if data.get("cancelled") else "") + ".",
        "",
    ]
    lines += [rounds_section.mode_line(results), ""]
    top = comparable.headline(results, (data.get("machine") or {}).get("threads"))
    if top:
        lines += [f"**{top}**", ""]
    lines += _writeup_table(results, summaries, not_comparable=top is not None)
    drifted = rounds_section.drift_lines(results)
    lines += ["", *drifted] if drifted else []
    if data.get("figure_lines"):
        lines += ["", heading("figures"), "", *data["figure_lines"]]
    lines += ["", heading("conditions"), ""]
    summary = answer.conditions_summary(results)
    lines += [summary, ""] if summary else []
    lines += ["Machine:", ""] + conditions.machine_lines(results, data.get("machine"))
    lines += ["", "Prompts:", ""] + conditions.prompt_lines(results)
    outputs = conditions.output_lines(results)
    if outputs:
        lines += ["", "Outputs:", ""] + outputs
    set_lines = set_acceptance.condition_lines(results, data.get("steps"))
    if set_lines:
        lines += [""] + set_lines
    references = conditions.reference_lines(results, data.get("machine"))
    if references:
        lines += ["", "Baselines against the engine's own tool:", ""] + references
    counts = conditions.count_check_lines(results)
    if counts:
        lines += ["", "Counts against the server's own:", ""] + counts
    lines += ["", heading("detail"), ""] + _detail_table(summaries)
    econ = _economics_lines(summaries)
    if econ:
        lines += ["", heading("why"), ""] + econ
    lines += ["", heading("acceptance"), ""] + _position_lines(data)
    lines += ["", heading("prediction"), ""] + _prediction_or_why(data, probe)
    from lab.render import policy as policy_section

    lines += policy_section.markdown_lines(data, _probes(data, probe))
    lines += ["", heading("statistics"), ""] + _stats_lines(summaries)
    if categories.has_categories(results):
        lines += ["", heading("per-category"), ""] + category_section.markdown_lines(results, profile.get("prompts") or ())
    lines += ["", heading("latency"), ""] + latency_section.markdown_lines(results)
    lines += ["", heading("greedy-equivalence"), ""] + _divergence_lines(results)
    beside = engines_section.markdown_lines(data)
    lines += ["", heading("engines"), "", *beside] if beside else []
    lines += lossless_lines.markdown_lines(data.get("lossless"))
    for sid, section in (("concurrency", serving.concurrency_lines(results)),
                         ("servers", serving.attached_lines(results)),
                         ("gpu", gpu_report.markdown_lines(results))):
        lines += ["", heading(sid), "", *section] if section else []
    lines += memory_section.section_lines(data)
    roofs = analysis.roofline(results, probe, data.get("bandwidth_bytes_s"))
    lines += ["", heading("roofline"), ""]
    if roofs:
        lines += [f"- {arm}: {r.line()}" for arm, r in roofs]
    elif probe is not None and probe.on_gpu:
        lines.append(
            "The model ran on a GPU: its memory bandwidth, which the lab does not measure, bounds plain decoding. "
            "Give it with `lab report RUN_DIR --bandwidth GBPS`."
        )
    else:
        lines.append(
            "No memory bandwidth known: `lab probe` measures it (saved with the probe), "
            "or give one with `lab report RUN_DIR --bandwidth GBPS`."
        )
    # cells someone stopped are no failures: they get a section of their own
    for sid, rows in (
        ("failures", [r for r in results if r["status"] != "ok" and r["status"] not in STOPPED_STATUSES
                      and r.get("detail")]),
        ("not-measured", [r for r in results if r["status"] in STOPPED_STATUSES]),
    ):
        if not rows:
            continue
        lines += ["", heading(sid), ""]
        seen: set[tuple[str, str]] = set()
        for r in rows:
            key = (r["arm"], r["status"])
            if key in seen:
                continue
            seen.add(key)
            count = sum(1 for x in rows if (x["arm"], x["status"]) == key)
            first_line = (str(r.get("detail") or "").splitlines() or [""])[0]
            cells = f" ({count} cells)" if count > 1 else ""
            lines.append(f"- **{r['arm']}** {r['status']}{cells}: {first_line}".rstrip(": "))
    left = _left_behind_lines(data.get("arm_reports"))
    lines += ["", heading("left-running"), "", *left] if left else []
    lines += [
        "",
        "Speedup is against each arm's own stack baseline, same prompt and round. Step cost is a step's "
        "seconds over the baseline's seconds per token; a step can land at most max yield = n_max + 1 tokens.",
        "",
    ]
    from lab.render.what_to_run import markdown_lines as what_to_run_lines

    lines += what_to_run_lines(data)
    return "\n".join(lines)


# -- CSV and JSON -----------------------------------------------------------------

# The CSV columns are the row schema's (lab.base.row.CSV_KEYS).



def render_csv(data: Mapping[str, Any]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(CSV_KEYS), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    paired = analysis.ran_paired(data)
    for r in data["results"]:
        row = {k: r.get(k) for k in CSV_KEYS}
        econ = breakeven.economics(r)
        row["break_even_len"] = econ.break_even_len if econ else None
        row["needed_acceptance"] = econ.needed_acceptance if econ else None
        row["verdict_kind"] = judge(r, paired=paired).kind
        if row.get("detail"):
            row["detail"] = str(row["detail"]).splitlines()[0]
        writer.writerow(row)
    return buf.getvalue()


def analysis_json(data: Mapping[str, Any]) -> dict[str, Any]:
    results = data["results"]
    probe = _probe(data)
    steps = data.get("steps")
    out: dict[str, Any] = {
        "summaries": analysis.summarize(results, analysis.ran_paired(data)),
        "divergences": analysis.divergences(results),
        "categories": [c.to_json() for c in categories.category_table(results)],
        "positions": None,
        "predictions": None,
        "pass_kinds": None,
        "probe": probe.to_json() if probe is not None else None,
        "roofline": [
            {"arm": arm, "model_bytes": r.model_bytes, "bandwidth_bytes_s": r.bandwidth_bytes_s,
             "bound_tok_per_s": r.bound_tok_per_s, "fraction": r.fraction}
            for arm, r in analysis.roofline(results, probe, data.get("bandwidth_bytes_s"))
        ],
    }
    if steps is not None:
        out["positions"] = [
            # "rates" is the conditional (its name before the unconditional stood beside it)
            {"arm": a, "prompt": p, "reached": list(v.reached), "accepted": list(v.accepted), "rates": list(v.rates),
             "drafting_steps": v.drafting_steps, "conditional": list(v.conditional),
             "unconditional": list(v.unconditional)}
            for (a, p), v in analysis.positions(steps).items()
        ]
        # this run's passes by kind beside the probe's (no probe: this run's alone)
        out["pass_kinds"] = [k.to_json() for k in pass_kinds.pass_kinds(results, steps, _probes(data, probe))]
        if probe is not None:
            try:
                out["predictions"] = analysis.predicted_for_rows(results, steps, _probes(data, probe))
            except (ArithmeticError, ValueError, TypeError):
                out["predictions"] = None  # the prediction alone is lost (the Markdown report says why)
    from lab.render import policy as policy_section

    out["draft_policy"] = policy_section.json_data(data, _probes(data, probe))
    out["latency"] = analysis.latency_summary(results)
    out["references"] = [c.to_json() for c in compare_references(results, data.get("machine"))]
    return out


def render_json(data: Mapping[str, Any]) -> str:
    saved = {k: v for k, v in data.items() if k not in ("steps", "probe", "probes", "figure_lines")}
    from lab.base.strictjson import dumps

    # strict JSON, as the run's own files: a non-finite figure is null
    return dumps({**saved, "analysis": analysis_json(data)}, indent=1) + "\n"


def render(data: Mapping[str, Any], fmt: str) -> str:
    if fmt == "md":
        return render_markdown(data)
    if fmt == "csv":
        return render_csv(data)
    if fmt == "json":
        return render_json(data)
    raise ValueError(f"unknown report format {fmt!r}; use md, csv or json")
