"""A run's figures, drawn with matplotlib (Agg, no display) from the series
:mod:`lab.render.figure_data` builds: SVG (text kept as text, so files stay
small and searchable) and PNG. :func:`draw` runs in the drawing process
(:mod:`lab.render.draw`), never in the lab's: that module writes them into
``RUN_DIR/figures/`` after the run's report is written, or returns their
bytes for the HTML page. matplotlib is imported inside the functions: the
core imports nothing heavy at module level."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from lab.render import figure_data as fd

FIGURE_DIR = "figures"
FORMATS = ("svg", "png")
PNG_DPI = 100
WIDTH_IN = 7.5
MAX_PANELS = 8  # arms or prompts drawn side by side; the rest named in the figure's note

# matplotlib settings for every figure: text as text in SVG, no timestamps or
# random ids (the same run draws the same bytes), a laptop-readable font size
_RC: dict[str, Any] = {
    "svg.fonttype": "none",
    "svg.hashsalt": "speclab",
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "legend.fontsize": 8,
    "font.family": "DejaVu Sans",
}


@dataclass(frozen=True)
class Drawn:
    """A drawn figure: its stem, title, the id of the report section it belongs to,
    and its bytes per format."""

    name: str
    title: str
    section: str
    files: Mapping[str, bytes]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Outcome:
    """Every figure of a run: those drawn, a line for each one left out,
    and what ended the drawing process when it did not end well
    (:mod:`lab.render.draw`)."""

    drawn: tuple[Drawn, ...]
    left_out: tuple[str, ...]
    stopped: str | None = None


def _colors(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(max(n, 1))]


def _new(rows: int = 1, cols: int = 1, height: float = 3.6, sharey: bool = False) -> tuple[Any, Any]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(WIDTH_IN, height * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False, sharey=sharey)
    return fig, axes


def _save(fig: Any, formats: Sequence[str]) -> dict[str, bytes]:
    out = {}
    for fmt in formats:
        buf = io.BytesIO()
        meta = {"Date": None} if fmt == "svg" else {"Software": None}
        fig.savefig(buf, format=fmt, dpi=PNG_DPI, metadata=meta)
        out[fmt] = buf.getvalue()
    return out


def _panels(keys: Sequence[str], most: int = MAX_PANELS) -> tuple[list[str], list[str]]:
    """The first ``most`` panels, and a note naming those left out."""
    shown = list(keys[:most])
    rest = list(keys[most:])
    return shown, [f"not drawn (more than {most} panels): {', '.join(rest)}"] if rest else []


# -- one function per figure --------------------------------------------------------


def draw_verify_cost(curves: Sequence[tuple[str, fd.ProbeCurve]], title: str) -> Any:
    """T(w) against w, one line per probe (kept-all solid with its repeats'
    range, kept-none dashed), beside T = w and T = 1."""
    fig, axes = _new()
    ax = axes[0][0]
    top = max(max(c.widths) for _, c in curves)
    ax.plot([1, top], [1, top], color="0.45", linestyle=":", label="T = w (no amortization)")
    ax.plot([1, top], [1, 1], color="0.25", linestyle="--", label="T = 1 (ideal)")
    colors = _colors(len(curves))
    for (run, c), color in zip(curves, colors):
        name = f"{run}: {c.label}" if run else c.label
        ax.plot(c.widths, c.t, marker="o", color=color, label=f"{name}, kept all")
        if any(lo != hi for lo, hi in zip(c.t_min, c.t_max)):
            ax.fill_between(c.widths, c.t_min, c.t_max, color=color, alpha=0.15, linewidth=0)
        if c.kept_none:
            ax.plot(c.kept_none_widths, c.kept_none, marker="s", markerfacecolor="none", linestyle="--",
                    color=color, label=f"{name}, kept none")
    ax.set_xlabel(fd.W_AXIS)
    ax.set_ylabel(fd.T_AXIS)
    ax.set_title(title)
    ax.set_xlim(left=0.8)
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left")
    return fig


def draw_speedup(series: Sequence[tuple[str, fd.SpeedupSeries]], title: str) -> tuple[Any, list[str]]:
    """Speedup against n_max, one panel per prompt, one color per arm: the
    predicted curve (solid where measured positions carry it, dotted and
    hollow past them), the measured speedup with its rounds' range, the
    held-out prediction, and break-even at 1x. Two runs (a comparison)
    differ in line style and marker."""
    from matplotlib.lines import Line2D

    runs = list(dict.fromkeys(r for r, _ in series))
    prompts, notes = _panels(list(dict.fromkeys(s.prompt for _, s in series)))
    arms = list(dict.fromkeys(s.arm for _, s in series))
    color = dict(zip(arms, _colors(len(arms))))
    cols = min(len(prompts), 2)
    rows = (len(prompts) + cols - 1) // cols
    fig, axes = _new(rows, cols, height=3.2 if rows > 1 else 3.8, sharey=True)
    line: dict[str, Any] = {r: ("-", "--")[i % 2] for i, r in enumerate(runs)}
    mark = {r: ("D", "s")[i % 2] for i, r in enumerate(runs)}
    for i, prompt in enumerate(prompts):
        ax = axes[i // cols][i % cols]
        ax.axhline(1.0, color="0.3", linestyle="--", linewidth=1)
        for run, s in series:
            if s.prompt != prompt:
                continue
            c = color[s.arm]
            if s.curve_n_max:
                points = list(zip(s.curve_n_max, s.curve_speedup, s.curve_extrapolated))
                carried = [(n, y) for n, y, x in points if not x]
                extra = [(n, y) for n, y, x in points if x]
                if carried:
                    ax.plot(*zip(*carried), color=c, linestyle=line[run], marker=".", gid=f"predicted:{run}:{s.arm}")
                if extra:
                    # joined to the last carried point, so the curve reads as one line changing style
                    ax.plot(*zip(*(carried[-1:] + extra)), color=c, linestyle=":", marker="o",
                            markerfacecolor="none", markersize=4, gid=f"extrapolated:{run}:{s.arm}")
            if s.measured is not None and s.n_max is not None:
                lo = min(s.rounds) if s.rounds else s.measured
                hi = max(s.rounds) if s.rounds else s.measured
                ax.errorbar([s.n_max], [s.measured], yerr=[[s.measured - lo], [hi - s.measured]], color=c,
                            marker=mark[run], markersize=6, capsize=3, linestyle="none",
                            gid=f"measured:{run}:{s.arm}")
            if s.held_out is not None and s.n_max is not None:
                ax.plot([s.n_max], [s.held_out], color=c, marker="^", markerfacecolor="none", markersize=8,
                        linestyle="none", gid=f"held-out:{run}:{s.arm}")
        ax.set_title(prompt)
        ax.set_xlabel(fd.N_MAX_AXIS)
        if i % cols == 0:
            ax.set_ylabel(fd.SPEEDUP_AXIS)
        ax.xaxis.get_major_locator().set_params(integer=True)
    for j in range(len(prompts), rows * cols):
        axes[j // cols][j % cols].set_visible(False)
    fig.suptitle(title + " (break-even at 1x)")
    # colors name the arms; line styles and markers what a mark is
    keys: list[Any] = [Line2D([], [], color=color[a], linewidth=4) for a in arms]
    labels = list(arms)
    for run in runs:
        who = f"{run}: " if len(runs) > 1 else ""
        keys += [Line2D([], [], color="0.2", linestyle=line[run], marker="."),
                 Line2D([], [], color="0.2", marker=mark[run], linestyle="none")]
        labels += [f"{who}predicted", f"{who}measured (bar: rounds' range)"]
    keys += [Line2D([], [], color="0.2", linestyle=":", marker="o", markerfacecolor="none", markersize=4),
             Line2D([], [], color="0.2", marker="^", markerfacecolor="none", linestyle="none")]
    labels += ["predicted past the positions measured (*)", "held out (made before the row ran)"]
    fig.legend(keys, labels, loc="outside lower center", ncol=3, fontsize=7)
    return fig, notes


def draw_acceptance(series: Sequence[fd.PositionSeries], title: str) -> tuple[Any, list[str]]:
    """Acceptance per draft position, one panel per prompt: conditional
    solid, unconditional dashed, set rates as crosses."""
    prompts, notes = _panels(list(dict.fromkeys(s.prompt for s in series)))
    arms = list(dict.fromkeys(s.arm for s in series))
    color = dict(zip(arms, _colors(len(arms))))
    cols = min(len(prompts), 2)
    rows = (len(prompts) + cols - 1) // cols
    fig, axes = _new(rows, cols, height=3.2 if rows > 1 else 3.8, sharey=True)
    for i, prompt in enumerate(prompts):
        ax = axes[i // cols][i % cols]
        for s in series:
            if s.prompt != prompt:
                continue
            pos = [k + 1 for k, r in enumerate(s.reached) if r]
            cond = [s.conditional[k - 1] for k in pos]
            unc = [s.unconditional[k - 1] for k in pos]
            ax.plot(pos, cond, color=color[s.arm], marker="o")
            ax.plot(pos, unc, color=color[s.arm], marker="o", markerfacecolor="none", linestyle="--")
            if s.set_rates:
                ax.plot(range(1, len(s.set_rates) + 1), s.set_rates, color=color[s.arm], marker="x", markersize=8,
                        linestyle="none")
        ax.set_title(prompt)
        ax.set_xlabel(fd.POSITION_AXIS)
        if i % cols == 0:
            ax.set_ylabel(fd.ACCEPTANCE_AXIS)
        ax.set_ylim(0, 1.05)
        ax.yaxis.set_major_formatter(_percent())
        ax.xaxis.get_major_locator().set_params(integer=True)
    for j in range(len(prompts), rows * cols):
        axes[j // cols][j % cols].set_visible(False)
    fig.suptitle(title)
    # colors name the arms, line styles the measure: a key of each instead of every pairing
    from matplotlib.lines import Line2D

    keys = [Line2D([], [], color=color[a], linewidth=4) for a in arms]
    labels = list(arms)
    keys += [Line2D([], [], color="0.2", marker="o"),
             Line2D([], [], color="0.2", marker="o", markerfacecolor="none", linestyle="--")]
    labels += [fd.CONDITIONAL_LABEL, fd.UNCONDITIONAL_LABEL]
    if any(s.set_rates for s in series):
        keys.append(Line2D([], [], color="0.2", marker="x", linestyle="none"))
        labels.append("set rate (conditional, as the profile set it)")
    fig.legend(keys, labels, loc="outside lower center", ncol=2, fontsize=7)
    return fig, notes


def _percent() -> Any:
    from matplotlib.ticker import PercentFormatter

    return PercentFormatter(1.0, decimals=0)


# one mark per pass kind (lab.base.probe.PASS_KINDS) in every panel; steady passes are the line itself
_PASS_MARKS = {"first": ("o", "C5"), "switch": ("+", "C4"), "second": ("x", "C1")}


def draw_steps(series: Sequence[fd.StepSeries], title: str) -> tuple[Any, list[str]]:
    """Per speculative arm: each step's cost in baseline tokens in run order
    against the max yield (a cost above it is a structural loss), and how
    many tokens the steps landed."""
    names, notes = _panels([s.arm for s in series])
    shown = [s for s in series if s.arm in names]
    fig, axes = _new(len(shown), 2, height=2.2 if len(shown) > 1 else 3.0)
    for i, s in enumerate(shown):
        left, right = axes[i]
        xs = list(range(1, len(s.step_s) + 1))
        if any(c is not None for c in s.cost_tokens):
            pts = [(x, c) for x, c in zip(xs, s.cost_tokens) if c is not None]
            left.plot(*zip(*pts), linewidth=0.8, color="C0")
            left.set_ylabel(f"{s.arm}\n{fd.STEP_COST_TITLE}")
            if s.max_yield:
                left.axhline(s.max_yield, color="C3", linestyle="--")
                left.text(0.01, s.max_yield, f"{fd.MAX_YIELD_LABEL} {s.max_yield}", color="C3", va="bottom",
                          fontsize=7, transform=left.get_yaxis_transform())
            kinds = sorted({k for k in s.pass_kinds if k and k != "steady"})
            for k in kinds:
                marker, tone = _PASS_MARKS.get(k, ("1", "C7"))
                # the passes that ran off the captured graph, where the loop told each step's kind
                marked = [(x, c) for x, c, kind in zip(xs, s.cost_tokens, s.pass_kinds) if kind == k and c is not None]
                left.plot(*zip(*marked), marker=marker, color=tone, linestyle="none", markersize=5,
                          label=f"{k} pass")
            if kinds:
                left.legend(loc="lower right", fontsize=7)
            left.set_ylim(bottom=0, top=max([s.max_yield or 0, *(c for c in s.cost_tokens if c is not None)]) * 1.1)
        else:
            left.plot(xs, [x * 1000 for x in s.step_s], linewidth=0.8, color="C0")
            left.set_ylabel(f"{s.arm}\n{fd.STEP_COST_MS_TITLE}")
        edge = 0
        for _, _, n in s.cells[:-1]:
            edge += n
            left.axvline(edge + 0.5, color="0.7", linewidth=0.6)
        left.set_xlabel(fd.STEP_AXIS + " (cells one after another)" if i == len(shown) - 1 else "")
        hist = fd.landed_histogram(s.landed, s.max_yield)
        right.bar([n for n, _ in hist], [c for _, c in hist], color="C2")
        right.set_ylabel(fd.STEPS_COUNT_AXIS)
        right.xaxis.get_major_locator().set_params(integer=True)
        if i == 0:
            right.set_title(fd.LANDED_TITLE)
            left.set_title(fd.STEP_COST_TITLE)
    fig.suptitle(title + f" (dashed: {fd.MAX_YIELD_LABEL}; a step costing more is a structural loss)", fontsize=9)
    return fig, notes


def draw_latency(rows: Sequence[Mapping[str, Any]], title: str) -> Any:
    """TTFT per arm x prompt, and its inter-token gaps' p50, p95 and p99."""
    labels = [f"{r['arm']} / {r['prompt']}" for r in rows]
    fig, axes = _new(1, 2, height=max(2.4, 0.32 * len(rows) + 1.2), sharey=True)
    left, right = axes[0]
    ys = list(range(len(rows)))
    ttft = [(r["ttft_s"] or 0.0) * 1000 for r in rows]
    left.barh(ys, ttft, color="C0")
    left.set_yticks(ys, labels)
    left.invert_yaxis()
    left.set_xlabel("TTFT ms")
    for key, marker, name in (("itl_p50_s", "o", "ITL p50 ms"), ("itl_p95_s", "^", "ITL p95 ms"),
                              ("itl_p99_s", "x", "ITL p99 ms")):
        pts = [(r[key] * 1000, y) for r, y in zip(rows, ys) if r.get(key) is not None]
        if pts:
            right.plot(*zip(*pts), marker=marker, linestyle="none", label=name)
    right.set_xlabel("inter-token gap ms")
    right.set_xscale("symlog", linthresh=1.0)
    fig.legend(loc="outside lower center", ncol=3)
    fig.suptitle(title + " (medians over rounds)")
    return fig


def draw_policy(series: Sequence[fd.PolicySeries], title: str) -> tuple[Any, list[str]]:
    """Each arm x prompt's replayed policies as bars, the best fixed n
    first, beside the fixed-n curve's points."""
    labels = [f"{s.arm} / {s.prompt}" for s in series]
    shown, notes = _panels(labels, most=12)
    series = [s for s, lab in zip(series, labels) if lab in shown]
    fig, axes = _new(1, 1, height=max(2.6, 0.55 * len(series) + 1.4))
    ax = axes[0][0]
    names = list(dict.fromkeys(n if not n.startswith("fixed ") else "best fixed n" for s in series for n in s.names))
    colors = dict(zip(names, _colors(len(names))))
    height = 0.8 / max(len(names), 1)
    for i, s in enumerate(series):
        for name, value in zip(s.names, s.speedups):
            key = "best fixed n" if name.startswith("fixed ") else name
            k = names.index(key)
            ax.barh(i - 0.4 + height * (k + 0.5), value, height=height * 0.9, color=colors[key],
                    label=key if i == 0 or key not in {n for t in series[:i] for n in t.names} else None)
            ax.text(value, i - 0.4 + height * (k + 0.5), f" {value:.2f}x" + (f" (n {name[6:]})" if key != name else "")
                    + (" best" if s.best == name else ""), va="center", fontsize=7)
    ax.axvline(1.0, color="0.3", linestyle="--", linewidth=1)
    ax.set_yticks(range(len(series)), [f"{s.arm} / {s.prompt}" for s in series])
    ax.invert_yaxis()
    ax.set_xlabel("predicted " + fd.SPEEDUP_AXIS)
    ax.set_xlim(0, max(max(s.speedups) for s in series) * 1.3)
    handles, labs = ax.get_legend_handles_labels()
    uniq = dict(zip(labs, handles))
    fig.legend(list(uniq.values()), list(uniq.keys()), loc="outside lower center", ncol=len(uniq))
    ax.set_title(title)
    return fig, notes


def draw_memory(bars: Sequence[fd.MemoryBar], title: str) -> Any:
    """Peak memory per arm; on a GPU also its peak device memory and mean power."""
    # units as the report prints them: Detail in MiB, the GPU section in GiB and W
    panels = [("peak_mem_bytes", "peak memory MiB (host)", 2**20, ".0f"),
              ("gpu_peak_mem_bytes", "peak GPU memory GiB", 2**30, ".2f"),
              ("gpu_mean_power_w", "mean GPU power W", 1, ".0f")]
    panels = [p for p in panels if any(getattr(b, p[0]) for b in bars)]
    fig, axes = _new(1, len(panels), height=max(2.2, 0.32 * len(bars) + 1.2), sharey=True)
    ys = list(range(len(bars)))
    for ax, (key, label, unit, spec) in zip(axes[0], panels):
        vals = [(getattr(b, key) or 0) / unit for b in bars]
        ax.barh(ys, vals, color="C4")
        for y, v in zip(ys, vals):
            if v:
                ax.text(v, y, f" {v:{spec}}", va="center", fontsize=7)
        ax.set_xlabel(label)
        ax.set_xlim(0, max(vals) * 1.25 if any(vals) else 1)
    axes[0][0].set_yticks(ys, [b.arm for b in bars])
    axes[0][0].invert_yaxis()
    fig.suptitle(title + (" and mean GPU power" if any(b.gpu_mean_power_w for b in bars) else ""))
    return fig


def _draw(p: fd.Planned) -> tuple[Any, list[str]]:
    if p.name in ("speedup", "compare-speedup"):
        pairs = p.data if p.name.startswith("compare") else [("", s) for s in p.data]
        return draw_speedup(pairs, p.title)
    if p.name in ("verify-cost", "compare-verify-cost"):
        pairs = p.data if p.name.startswith("compare") else [("", c) for c in p.data]
        return draw_verify_cost(pairs, p.title), []
    if p.name == "acceptance":
        return draw_acceptance(p.data, p.title)
    if p.name == "steps":
        return draw_steps(p.data, p.title)
    if p.name == "latency":
        return draw_latency(p.data, p.title), []
    if p.name == "policy":
        return draw_policy(p.data, p.title)
    if p.name == "memory":
        return draw_memory(p.data, p.title), []
    raise ValueError(f"no drawing for figure {p.name!r}")


def draw(planned: Sequence[fd.Planned], formats: Sequence[str] = FORMATS) -> Outcome:
    """Draw every planned figure that has data; one that fails to draw is
    left out with its reason, the others still drawn."""
    import matplotlib

    drawn, left_out = [], []
    with matplotlib.rc_context(_RC):  # type: ignore[arg-type]
        for p in planned:
            if p.missing is not None:
                left_out.append(f"{p.title}: {p.missing}")
                continue
            try:
                fig, notes = _draw(p)
                files = _save(fig, formats)
            except Exception as exc:  # noqa: BLE001 - one figure's failure costs that figure, never the others
                left_out.append(f"{p.title}: could not be drawn ({type(exc).__name__}: {str(exc)[:120]})")
                continue
            drawn.append(Drawn(p.name, p.title, p.section, files, tuple(p.notes + notes)))
    return Outcome(tuple(drawn), tuple(left_out))


def markdown_lines(outcome: Outcome, link_dir: str = FIGURE_DIR) -> list[str]:
    """The report's Figures section: each figure linked (SVG, PNG beside it)
    and a line for each one the run could not have."""
    lines = []
    for d in outcome.drawn:
        fmt = "svg" if "svg" in d.files else next(iter(d.files))
        png = f" ([PNG]({link_dir}/{d.name}.png))" if "png" in d.files and fmt != "png" else ""
        lines.append(f"- [{d.title}]({link_dir}/{d.name}.{fmt}){png}")
        lines += [f"  - {n}" for n in d.notes]
    if outcome.left_out:
        lines += ["", "Not drawn:", ""] + [f"- {x}" for x in outcome.left_out]
    if outcome.stopped:
        lines += ["", f"Drawing stopped: {outcome.stopped}. `lab report RUN_DIR --figures` draws them again."]
    return lines


def existing(run_dir: str | Path) -> Outcome | None:
    """The figures a run directory already holds (as an earlier rendering
    wrote them), in the figures' order; None where it holds none."""
    where = Path(run_dir) / FIGURE_DIR
    if not where.is_dir():
        return None
    drawn = []
    for name, title, section, *_ in fd.FIGURES:
        files = {fmt: b"" for fmt in FORMATS if (where / f"{name}.{fmt}").is_file()}
        if files:
            drawn.append(Drawn(name, title, section, files))
    return Outcome(tuple(drawn), ()) if drawn else None
