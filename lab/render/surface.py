"""A probe surface as text: T(w) per width and KV depth (``lab probe
--depths``), and an acceptance profile priced at every depth (``lab predict
--probe SURFACE``), with each input's origin stated."""

from __future__ import annotations

from typing import Sequence

from lab.analysis.acceptance_file import AcceptanceFile, probe_machine_words, switch_words
from lab.analysis.surface import DepthPrediction, SurfacePrediction
from lab.base.probe import Probe, Surface, format_widths


def _depth(d: int | None) -> str:
    return str(d) if d is not None else "?"


def surface_table(surface: Surface) -> str:
    """T(w) at each depth in that depth's own one-row pass and in the
    shallowest's (the baseline token itself slows with depth)."""
    first = surface.shallowest
    widths = surface.widths()
    head = f"{'w':>3}  " + "  ".join(f"{'d=' + _depth(d):>8}" for d in surface.depths)
    lines = [
        f"verify cost by KV depth on {first.backend} / {first.model} by {first.method}, "
        f"{len(first.seconds)} repeats" + (f", {first.threads} threads" if first.threads else ""),
        "",
        "T(w) in one-row passes at the same depth:",
        head,
    ]
    for w in widths:
        lines.append(f"{w:>3}  " + "  ".join(f"{p.t_ratio(w) or 0.0:>8.2f}" for p in surface.probes))
    lines += ["", f"the same passes in one-row passes at depth {_depth(first.kv_depth)} "
              f"({first.pass_seconds(1) * 1000:.3f} ms):", head]
    for w in widths:
        lines.append(f"{w:>3}  " + "  ".join(f"{surface.relative(p, w):>8.2f}" for p in surface.probes))
    lines.append("")
    lines.append("one-row pass: " + ", ".join(f"{p.pass_seconds(1) * 1000:.3f} ms at depth {_depth(p.kv_depth)}"
                                              for p in surface.probes))
    trust = surface.trust
    lines.append(f"every depth: no trustworthy probe: {trust.reason}" if not trust.trusted else
                 "every depth: checked, a pass rising with KV depth within its repeats' noise")
    return "\n".join(lines)


def _row(d: DepthPrediction, n_values: Sequence[int]) -> str:
    by_n = {p.n_max: p for p in d.predictions}
    cells = [f"{by_n[n].speedup:>6.2f}x" if n in by_n else f"{'-':>7}" for n in n_values]
    best = (f"n_max {d.best.n_max}: {d.best.speedup:.2f}x" + (" *" if d.best.extrapolated else "")
            if d.best is not None else "none")
    return f"  {_depth(d.depth):>6}  {d.baseline_token_s * 1000:>8.3f}  " + " ".join(cells) + f"  {best}"


def _stops(sp: SurfacePrediction) -> str:
    stop = sp.stops_paying()
    deepest = sp.depths[-1]
    if stop is not None:
        a, b = stop.last_paying, stop.first_losing
        about = f", about {stop.about:.0f} tokens on the line between them" if stop.about is not None else ""
        # a curve that pays only in the middle (often noise near 1.0x) says so
        before = [_depth(d.depth) for d in sp.depths[:sp.depths.index(a)] if not d.pays]
        either = f"; it does not pay at depth {', '.join(before)} either" if before else ""
        return (f"  drafting stops paying between depth {_depth(a.depth)} (best {a.best.speedup:.2f}x) and "
                f"depth {_depth(b.depth)} (best {b.best.speedup if b.best else 0.0:.2f}x){about}{either}"
                if a.best is not None else f"  drafting stops paying by depth {_depth(b.depth)}")
    if all(d.pays for d in sp.depths):
        best = deepest.best
        return (f"  pays at every measured depth, to {_depth(deepest.depth)} "
                f"(best there {best.speedup:.2f}x at n_max {best.n_max})" if best is not None else "  pays at every depth")
    if not any(d.pays for d in sp.depths):
        return "  pays at no measured depth: every step costs more than it lands"
    losing = [_depth(d.depth) for d in sp.depths if not d.pays]
    return f"  does not pay at depth {', '.join(losing)}"


def render_surface_predictions(profile: AcceptanceFile, surface: Surface,
                               predictions: Sequence[SurfacePrediction], draft_probe: Probe | None = None) -> str:
    first = surface.shallowest
    lines = [
        "Inputs:",
        f"- acceptance per position and the share of plain tokens: the acceptance file, measured in "
        f"{profile.source_line()}; the same at every depth",
        f"- T(w) and the baseline token at each KV depth ({', '.join(_depth(d) for d in surface.depths)}): the probe "
        f"surface of {first.backend} / {first.model} by {first.method} on {probe_machine_words(first)}"
        + (f", measured {first.created}" if first.created else "")
        + ("; its T(w) prices whole steps, draft and loop inside" if first.prices_steps else ""),
        f"- the draft's and the loop's seconds: as the shallowest depth ({_depth(first.kv_depth)}) prices them; "
        "the loop's and a lookup drafter's held in seconds at every depth, a draft model's scaled with the target's "
        "one-row pass (its context deepens too)",
    ]
    if draft_probe is not None:
        lines.append(f"- draft seconds of a model drafter: the draft probe of {draft_probe.model} "
                     f"(at its own depth {_depth(draft_probe.kv_depth)})")
    lines.append("")
    for sp in predictions:
        c = sp.cross
        e = c.entry
        lines.append(f"{e.label}: target {e.target}, drafter {e.drafter or '?'}"
                     + (f" ({e.drafter_model})" if e.drafter_model else "")
                     + f", measured at n_max {e.n_max if e.n_max is not None else '?'}"
                     + f", {e.positions.drafting_steps} drafting steps")
        lines.append(f"  draft cost: {c.draft_from}")
        lines.append(f"  loop cost: {c.loop_from}")
        lines.append(f"  width switches: {switch_words(e, first)}")
        for w in c.warnings:
            lines.append(f"  ⚠ {w}")
        n_values = sorted({p.n_max for d in sp.depths for p in d.predictions})
        lines.append(f"  {'depth':>6}  {'token ms':>8}  " + " ".join(f"{'n=' + str(n):>7}" for n in n_values)
                     + "  best")
        lines += [_row(d, n_values) for d in sp.depths]
        lines.append(_stops(sp))
        lines.append("")
    lines.append(
        "depth: tokens in the KV cache before the verify pass; token ms: the baseline token there (the one-row "
        "pass); n=k: the predicted speedup at n_max k against a baseline decoding at the same depth; "
        f"n_max {format_widths(sorted({p.n_max for sp in predictions for d in sp.depths for p in d.predictions}))}. "
        "* marks a best n_max beyond the positions measured.")
    return "\n".join(lines) + "\n"
