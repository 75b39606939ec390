"""``lab run PROFILE``: the profile checked, every arm run headless, a run
directory saved as it goes, the comparison printed at the end, and only
then the figures drawn."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lab.analysis.comparable import headline
from lab.base.cells import Status
from lab.base.events import Listener, RunStarted
from lab.base.textsafe import PrintableStream, printable
from lab.cli.context import (
    EXIT_ROW_FAILED,
    EXIT_SIGINT,
    EXIT_SIGTERM,
    Context,
    checked_profile,
    engines_ready,
    load_errors_line,
    sigterm_as_interrupt,
)
from lab.cli.fetch import fetch_for_run
from lab.cli.progress import Progress, table
from lab.profile.model_uses import model_uses
from lab.render.report import ReportWriter
from lab.render.run_summary import what_to_run_text
from lab.runner import Runner
from lab.store import RunStore, StoreError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("profile")
    p.add_argument("--out", help="parent directory of the run directory (default: runs/)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument("--force", action="store_true",
                   help="run arms the memory check expects not to fit (they may end as oom)")


def run(args: argparse.Namespace, ctx: Context) -> int:
    registry = ctx.registry
    if registry.errors:
        print(f"lab: {load_errors_line(registry)}", file=sys.stderr)
    # everything knowable without a model is refused before anything starts
    profile = checked_profile(args.profile, registry)
    if profile is None:
        return 2
    # an arm whose engine cannot load is refused before anything is measured or saved
    status = engines_ready(profile, registry)
    if status is not None:
        return status
    # hub models the cache lacks are fetched before the first arm, never inside one
    status = fetch_for_run(args.profile, model_uses(profile, registry), args.quiet)
    if status is not None:
        return status
    # an arm whose memory will not fit is refused before anything loads, unless forced
    from lab.cli.fit import report_fit

    term: list[int] = []
    try:
        with sigterm_as_interrupt() as term:
            refused = report_fit(profile, registry, out=sys.stderr, show=not args.quiet)
    except KeyboardInterrupt:
        print(f"\nlab: {'terminated (SIGTERM)' if term else 'interrupted'} before the run started", file=sys.stderr)
        return EXIT_SIGTERM if term else EXIT_SIGINT
    if refused and not args.force:
        print(f"lab: nothing was run; {len(refused)} arm(s) will not fit in memory here "
              "(`lab run --force` tries anyway)", file=sys.stderr)
        return 2
    if refused:
        print(f"lab: --force: running {len(refused)} arm(s) expected not to fit", file=sys.stderr)
    try:
        store = RunStore(profile, args.out, on_moved=_say_moved)
    except StoreError as exc:
        print(f"lab: {printable(exc)}", file=sys.stderr)
        return 2
    # figures last, after the summary: drawing them can crash or hang (in a
    # process of their own), which must cost nothing that comes before
    report = ReportWriter(store, figures_later=True)
    listeners: list[Listener] = [report]
    if not args.quiet:
        listeners.append(Progress(PrintableStream(sys.stderr)))  # type: ignore[arg-type]
    # how threads = 0 was resolved: the summary's headline needs it
    started: list[RunStarted] = []
    listeners.append(lambda event: started.append(event) if isinstance(event, RunStarted) else None)
    runner = Runner(profile, registry, store, listeners)
    try:
        with sigterm_as_interrupt() as term:
            results = runner.run()
    except KeyboardInterrupt:
        how = "terminated (SIGTERM)" if term else "interrupted"
        print(f"\nlab: {how}; what was measured is in {printable(store.path)}, the rest is cancelled",
              file=sys.stderr)
        return EXIT_SIGTERM if term else EXIT_SIGINT
    top = headline(results, started[0].threads if started else None)
    if top:
        print(printable(top))
    # rows come in the order their cells ran (paired: arms interleaved); the table reads arm by arm
    arms = [a.name for a in profile.arms]
    prompts = [q.name for q in profile.prompts]
    in_order = sorted(results, key=lambda r: (arms.index(r.arm) if r.arm in arms else len(arms),
                                             prompts.index(r.prompt) if r.prompt in prompts else len(prompts), r.round))
    print(printable(table(in_order, paired=profile.run.order == "paired"), keep="\n"))
    print(printable(what_to_run_text(None if store.memory_only else store.path, registry), keep="\n"), end="")
    if report.error:
        # a run whose report could not be written did not end well, whatever its rows
        print(f"lab: {printable(report.error)}", file=sys.stderr)
    if store.memory_only:
        print(f"\nlab: {printable(store.path)} holds the run only up to where writing failed (see above); "
              "the table above has every row", file=sys.stderr)
        return 1
    print(f"\nsaved: {printable(store.path)}")
    failed = sum(1 for row in results if row.status in _FAILED)
    code = 1 if report.error else EXIT_ROW_FAILED if failed else 0
    if failed and not report.error:
        print(f"lab: {failed} row(s) failed (error, crashed or oom); the report says why", file=sys.stderr)
    sys.stdout.flush()
    try:
        with sigterm_as_interrupt() as term:
            figures = report.add_figures()
    except KeyboardInterrupt:
        print(f"\nlab: {'terminated (SIGTERM)' if term else 'interrupted'} while drawing figures; report.md is "
              "written without them", file=sys.stderr)
        return EXIT_SIGTERM if term else EXIT_SIGINT
    if figures:
        # the figures' fate never changes the run's exit status
        print(f"lab: {printable(figures)}", file=sys.stderr)
    return code


_FAILED = frozenset({Status.ERROR, Status.CRASHED, Status.OOM})


def _say_moved(failed: Path, now: Path | None, reason: str) -> None:
    """The store's word when the run directory stopped taking writes."""
    where = f"the run goes on in {now}" if now is not None else "no fallback directory either; rows kept in memory"
    print(f"lab: cannot write {printable(failed)} ({printable(reason)}); {printable(where)}", file=sys.stderr, flush=True)
