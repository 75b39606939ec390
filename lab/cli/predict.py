"""``lab predict ACCEPTANCE_FILE --probe PROBE.json``: acceptance measured
on one machine priced by another machine's probe: the predicted speedup at
every n_max the probe covers, the best n_max and the break-even."""

from __future__ import annotations

import argparse
import sys

from lab.analysis import acceptance_file
from lab.analysis.surface import predict_on_surface
from lab.base import probe as probes
from lab.base.textsafe import printable
from lab.cli.context import Context
from lab.render.cross_machine import render
from lab.render.surface import render_surface_predictions

DESCRIPTION = ("Would it pay on another machine? Acceptance is a property of target, drafter and text (the "
               "acceptance file, from `lab acceptance` or a run's acceptance.json); cost is a property of the machine "
               "(the probe, from `lab probe --out`). The output says which input came from where.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("acceptance_file", help="an acceptance profile, or a run directory holding acceptance.json")
    p.add_argument("--probe", required=True, metavar="FILE",
                   help="the target's verify-cost probe on the machine to price, or its surface over KV depths "
                   "(lab probe --depths): then the speedup per depth and where drafting stops paying")
    p.add_argument("--draft-probe", metavar="FILE",
                   help="a probe of the draft model on that machine: its one-row pass is a drafted token's cost")
    p.add_argument("--loop-us", type=float, metavar="US",
                   help="the loop's own microseconds per step on that machine (default: the acceptance run's, "
                   "in baseline tokens)")
    p.add_argument("--arm", action="append", metavar="NAME", help="only these arms (repeatable)")
    p.add_argument("--no-categories", action="store_true", help="arm x prompt entries only")
    p.add_argument("--against", metavar="RUN_DIR",
                   help="the run the prediction is for, on the probe's machine: each row's measured speedup beside "
                   "the prediction, and the prediction again with the run's own acceptance (the error's split "
                   "between acceptance and costs)")


def run(args: argparse.Namespace, ctx: Context) -> int:
    try:
        profile = acceptance_file.load(args.acceptance_file)
        surface = probes.load_surface(args.probe)
        probe = surface.shallowest
        draft = probes.load(args.draft_probe) if args.draft_probe else None
        if args.loop_us is not None and not 0 <= args.loop_us < 1e6:
            raise ValueError(f"--loop-us {args.loop_us:g}: give microseconds per step, 0 or more")
        entries = [e for e in profile.entries if (not args.arm or e.arm in args.arm)
                   and not (args.no_categories and e.scope == acceptance_file.CATEGORY)]
        if not entries:
            raise ValueError(f"{args.acceptance_file}: no entries" + (f" for arm {', '.join(args.arm)}" if args.arm else ""))
        loop_s = args.loop_us * 1e-6 if args.loop_us is not None else None
        # several depths: each priced, and where drafting stops paying
        deep = [predict_on_surface(e, surface, draft, loop_s) for e in entries] if len(surface.probes) > 1 else []
        got = [acceptance_file.predict_on(e, probe, draft, loop_s) for e in entries]
        if args.against and len(surface.probes) > 1:
            raise ValueError(f"--against {args.against}: a run is checked against one depth's probe, not a surface "
                             "of several; give the probe of the run's own depth")
        against = _against(args.against, got, probe, draft, loop_s) if args.against else None
    except (acceptance_file.AcceptanceFileError, probes.ProbeError, ValueError, OSError) as exc:
        print(f"lab: {printable(exc)}", file=sys.stderr)
        return 2
    if min(max(p.widths) for p in surface.probes) < 2:
        print(f"lab: {printable(args.probe)}: the probe measured width 1 only; a prediction needs T(w) at w >= 2",
              file=sys.stderr)
        return 2
    for w in dict.fromkeys(w for c in got for w in c.warnings):
        print(f"lab: warning: {printable(w)}", file=sys.stderr)
    if deep:
        sys.stdout.write(printable(render_surface_predictions(profile, surface, deep, draft), keep="\n"))
    else:
        sys.stdout.write(printable(render(profile, probe, got, draft), keep="\n"))
    if against is not None:
        sys.stdout.write("\n" + printable(against, keep="\n"))
    return 0


def _against(run_dir: str, got: list[acceptance_file.CrossPrediction], probe: probes.Probe,
             draft: probes.Probe | None, loop_s: float | None) -> str:
    """The check against a run (lab.analysis.cross_check), as text."""
    from lab.analysis import cross_check
    from lab.render.cross_machine import render_check
    from lab.store import load_run

    data = load_run(run_dir)
    run_profile = acceptance_file.load(run_dir)
    checks = cross_check.check(got, run_profile, data.get("results") or [], probe, draft, loop_s)
    return render_check(run_dir, acceptance_file.machine_words(run_profile.source.get("machine")), checks)
