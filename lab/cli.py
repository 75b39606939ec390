"""The ``lab`` command.

lab                         open the TUI on profiles/demo.toml
lab PROFILE.toml            open the TUI on a profile
lab run PROFILE [--out DIR] run headless, print progress and the comparison
lab report RUN_DIR [--format md|csv|json] [--compare RUN_B] [--probe FILE]
lab probe [--backend B] [--model M] [--option K=V] [--profile P [--arm A]] [--widths 1-16] [--method M] [--out FILE]
lab check PROFILE           validate a profile without loading a model
lab lossless [-d DRAFTER]   test at temperature > 0 that drafters keep the target's distribution
lab plugins                 backends, drafters, their options, load errors
lab new-drafter NAME [--dir DIR]  write a drafter plugin package to start from
lab doctor                  engines, tools and models, and how to fix what is missing
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Sequence, TextIO

from lab.events import Finished, RunStarted, Status, StatusChanged
from lab.probe import ProbeReported
from lab.run_events import Listener, RunEvent, finished_row

if TYPE_CHECKING:
    from lab.plugins import Registry
    from lab.results import ResultRow

DEFAULT_PROFILE = "profiles/demo.toml"
# Exit statuses of a run stopped from outside: the shell's 128 + signal.
EXIT_SIGINT = 130
EXIT_SIGTERM = 143


class Terminated(KeyboardInterrupt):
    """SIGTERM (what `timeout`, `kill` and service managers send), raised in
    the main thread so that a run ends exactly as Ctrl-C ends it: the
    running cell cancelled, the rest cancelled, engines and servers
    stopped, results.json and report.md written."""


@contextmanager
def sigterm_as_interrupt() -> Iterator[list[int]]:
    """While inside, SIGTERM raises :class:`Terminated`; the list it yields
    holds the signal once one came. A second SIGTERM during the clean-up
    the first one started is ignored, so the clean-up finishes (SIGKILL
    remains the way to cut it short)."""
    got: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        if got:
            return
        got.append(signum)
        raise Terminated()

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: nothing to install
        yield got
        return
    try:
        yield got
    finally:
        signal.signal(signal.SIGTERM, previous)


def default_profile() -> Path:
    """profiles/demo.toml in the working directory, else the one beside the
    package (an editable or source checkout)."""
    here = Path(DEFAULT_PROFILE)
    if here.exists():
        return here
    return Path(__file__).resolve().parent.parent / DEFAULT_PROFILE


class Progress:
    """Headless progress, a listener of the run: one line per phase change
    (a phase says what the engine does, else the status does) and per
    finished cell; a phase said again for the same cell is not repeated."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._said: dict[object, str] = {}

    def __call__(self, event: RunEvent) -> None:
        if isinstance(event, RunStarted):
            self.out.write(f"run {event.profile}: {len(event.arms)} arms x {len(event.prompts)} prompts x {event.rounds} rounds -> {event.run_dir}\n")
        elif isinstance(event, StatusChanged):
            c = event.cell
            # a warmup cell's phase says "warming up"; its place need not say it too
            where = c.arm if c.round < 0 else f"{c.arm} {c.prompt}" + ("" if c.round == 0 else f" r{c.round}")
            if event.status in (Status.LOADING, Status.WARMUP, Status.RUNNING):
                text = event.phase or event.status.value
                if self._said.get(c) == text:
                    return
                self._said[c] = text
                self.out.write(f"  [{where}] {text}\n")
            elif event.status != Status.OK and c.round < 0:
                first = event.detail.splitlines()[0] if event.detail else ""
                self.out.write(f"  [{where}] {event.status.value} {first}\n")
        elif isinstance(event, Finished):
            self._finished(finished_row(event))
        elif isinstance(event, ProbeReported):
            where = f" {event.stack}" if event.stack else ""
            self.out.write(f"  [probe{where}] {'' if event.done else 'measuring '}{event.text}\n")
        else:
            return
        self.out.flush()

    def _finished(self, r: ResultRow) -> None:
        where = f"[{r.arm} {r.prompt} r{r.round}]"
        if not r.ok:
            lines = r.detail.splitlines()[:1]
            self.out.write(f"  {where} {r.status.value} {lines[0] if lines else ''}\n")
            return
        extra = ""
        if r.acceptance_rate is not None:
            extra = f", accept {r.acceptance_rate * 100:.0f}%, len {r.mean_accepted_len or 0:.2f}"
        if r.speedup is not None:
            extra += f", {r.speedup:.2f}x"
        self.out.write(f"  {where} {r.n_tokens} tokens, {r.tok_per_s or 0:.1f} tok/s{extra}\n")


def _table(rows: Sequence[ResultRow]) -> str:
    from lab.report import summarize
    from lab.verdict import busy_warning

    head = ["arm", "prompt", "tok/s", "speedup", "accept", "len", "cost/yield", "identical", "verdict"]
    lines = [head]
    for s in summarize(rows):
        cost = "" if s["step_cost_tokens"] is None else f"{s['step_cost_tokens']:.2f}/{s['max_yield']}"
        lines.append([
            s["arm"], s["prompt"],
            f"{s['tok_per_s']:.1f}" if s["tok_per_s"] is not None else s["status"],
            f"{s['speedup']:.2f}x" if s["speedup"] is not None else "",
            f"{s['acceptance_rate'] * 100:.0f}%" if s["acceptance_rate"] is not None else "",
            f"{s['mean_accepted_len']:.2f}" if s["mean_accepted_len"] is not None else "",
            cost,
            "" if s["identical_to_baseline"] is None else ("yes" if s["identical_to_baseline"] else f"no@{s['first_divergence_char']}"),
            " ".join(x for x in (s["verdict"], busy_warning(s)) if x),
        ])
    widths = [max(len(str(row[i])) for row in lines) for i in range(len(head) - 1)]
    out = []
    for row in lines:
        out.append("  ".join(str(c).ljust(w) for c, w in zip(row, widths)) + "  " + str(row[-1]))
    return "\n".join(out)


def cmd_run(args: argparse.Namespace) -> int:
    from lab.plugins import load_registry
    from lab.profiles import ProfileError, check_profile, option_warnings
    from lab.report import ReportWriter
    from lab.runner import Runner
    from lab.store import RunStore, StoreError
    from lab.textsafe import PrintableStream, printable

    registry = load_registry()
    if registry.errors:
        print(f"lab: {load_errors_line(registry)}", file=sys.stderr)
    try:
        # everything knowable without a model is refused before anything starts
        profile = check_profile(args.profile, registry)
    except ProfileError as exc:
        print(f"lab: {exc}", file=sys.stderr)
        return 2
    for line in option_warnings(profile, registry):
        print(f"lab: warning: {printable(line)}", file=sys.stderr)
    try:
        store = RunStore(profile, args.out, on_moved=_say_moved)
    except StoreError as exc:
        print(f"lab: {printable(exc)}", file=sys.stderr)
        return 2
    report = ReportWriter(store)
    listeners: list[Listener] = [report]
    if not args.quiet:
        listeners.append(Progress(PrintableStream(sys.stderr)))  # type: ignore[arg-type]
    runner = Runner(profile, registry, store, listeners)
    term: list[int] = []
    try:
        with sigterm_as_interrupt() as term:
            results = runner.run()
    except KeyboardInterrupt:
        how = "terminated (SIGTERM)" if term else "interrupted"
        print(f"\nlab: {how}; what was measured is in {printable(store.path)}, the rest is cancelled",
              file=sys.stderr)
        return EXIT_SIGTERM if term else EXIT_SIGINT
    print(printable(_table(results), keep="\n"))
    if report.error:
        print(f"lab: {printable(report.error)}", file=sys.stderr)
    if store.memory_only:
        print(f"\nlab: {printable(store.path)} holds the run only up to where writing failed (see above); "
              "the table above has every row", file=sys.stderr)
        return 1
    print(f"\nsaved: {printable(store.path)}")
    return 0


def _say_moved(failed: Path, now: Path | None, reason: str) -> None:
    """The store's word when the run directory stopped taking writes."""
    from lab.textsafe import printable

    where = f"the run goes on in {now}" if now is not None else "no fallback directory either; rows kept in memory"
    print(f"lab: cannot write {printable(failed)} ({printable(reason)}); {printable(where)}", file=sys.stderr, flush=True)


def load_errors_line(registry: Registry) -> str:
    """Plugins that failed to load, in one line."""
    from lab.textsafe import printable

    names = ", ".join(printable(e.entry_point) for e in registry.errors)
    return f"plugins not loaded: {names} (`lab plugins` says why)"


def cmd_check(args: argparse.Namespace) -> int:
    from lab.plugins import load_registry
    from lab.profiles import ProfileError, check_profile, option_warnings
    from lab.textsafe import printable

    registry = load_registry()
    try:
        profile = check_profile(args.profile, registry)
    except ProfileError as exc:
        print(f"lab: {exc}", file=sys.stderr)
        return 2
    for line in option_warnings(profile, registry):
        print(f"lab: warning: {printable(line)}", file=sys.stderr)
    cells = len(profile.arms) * len(profile.prompts) * profile.run.rounds
    print(
        f"{printable(profile.path)}: ok, {len(profile.arms)} arms x {len(profile.prompts)} prompts x "
        f"{profile.run.rounds} rounds = {cells} cells"
    )
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from lab.probe import ProbeError
    from lab.report import load_for_report, render
    from lab.store import load_run
    from lab.textsafe import printable

    try:
        data = load_for_report(args.run_dir, args.probe)
        if args.bandwidth:
            data["bandwidth_bytes_s"] = args.bandwidth * 1e9
        if args.compare:
            from lab.analysis.compare import render_compare, warnings

            data_b = load_run(args.compare)
            _say_unreadable(data_b)
            text = render_compare(data, data_b, args.format)
            if args.format == "csv":  # Markdown and JSON carry them; a CSV is cells only
                for line in warnings(data, data_b):
                    print(f"lab: warning: {line}", file=sys.stderr)
        else:
            text = render(data, args.format)
    except (OSError, ValueError, ProbeError) as exc:
        print(f"lab: {printable(exc)}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - a saved file is user data: a message, not a traceback
        print(f"lab: {printable(args.run_dir)}: cannot render this run ({type(exc).__name__}: {printable(exc)}); "
              "its files have a shape the lab does not save", file=sys.stderr)
        return 2
    _say_unreadable(data)
    # names and error texts in a saved run are not the lab's: nothing in
    # them may drive the terminal
    sys.stdout.write(printable(text, keep="\n\t"))
    return 0


def _say_unreadable(data: dict[str, object]) -> None:
    """What a saved run held that could not be used, on stderr (the report
    itself names it too)."""
    from lab.run_shape import Problems
    from lab.textsafe import printable

    found = data.get("unreadable")
    for line in Problems(found if isinstance(found, list) else []).lines():
        print(f"lab: not used: {printable(line)}", file=sys.stderr)


def cmd_probe(args: argparse.Namespace) -> int:
    """Measure verify cost T(w), print the curve, save it as JSON."""
    from lab import probe
    from lab.api import EngineFailure
    from lab.plugins import load_registry

    def say(msg: str) -> None:
        if not args.quiet:
            print(f"  {msg}", file=sys.stderr, flush=True)

    from lab.probe_target import resolve

    term: list[int] = []
    try:
        widths = probe.parse_widths(args.widths)
        registry = load_registry()
        # The backend's options (GPU layers...) as the run will load it.
        options = list(args.option or []) + ([f"n_gpu_layers={args.n_gpu_layers}"] if args.n_gpu_layers is not None else [])
        target = resolve(registry, args.backend, args.model, options, args.profile, args.arm, args.threads)
        say(f"target: {target.backend} / {target.model} from {target.source}, options {dict(target.options)}")
        with sigterm_as_interrupt() as term:
            result = probe.measure(
                target.backend, target.model, widths, method=args.method, repeats=args.repeats,
                threads=target.threads, registry=registry, options=target.options, bandwidth=not args.no_bandwidth,
                progress=say,
            )
    except KeyboardInterrupt as exc:
        return _probe_interrupted(args, exc, bool(term))
    except (probe.ProbeError, ValueError, KeyError, OSError, RuntimeError, NotImplementedError, EngineFailure) as exc:
        print(f"lab: probe failed: {exc}", file=sys.stderr)
        return 2
    print(result.render())
    if result.bandwidth_bytes_s and result.model_bytes and not result.on_gpu:
        from lab.analysis.roofline import Roofline

        print(Roofline(result.model_bytes, result.bandwidth_bytes_s, "measured read bandwidth").line())
    if args.out:
        try:
            print(f"saved: {probe.save(result, args.out)}")
        except OSError as exc:
            print(f"lab: probe not saved to {args.out} ({exc.strerror or exc}); the curve is printed above",
                  file=sys.stderr)
            return 2
    return 0


def _probe_interrupted(args: argparse.Namespace, exc: KeyboardInterrupt, terminated: bool) -> int:
    """Ctrl-C or SIGTERM stopped `lab probe`: show and save the repeats that
    finished (each holds every width), and say how much that is."""
    from lab import probe

    code = EXIT_SIGTERM if terminated else EXIT_SIGINT
    kept = exc.probe if isinstance(exc, probe.ProbeInterrupted) else None
    if kept is None:
        print("\nlab: probe stopped before its first repeat finished; nothing measured to keep", file=sys.stderr)
        return code
    print(kept.render())
    out = args.out or f"probe-{kept.backend}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    print(f"\nlab: probe stopped {kept.notes.get('interrupted', '')}; kept {len(kept.seconds)} repeat(s) of "
          f"widths {probe.format_widths(kept.widths)}", file=sys.stderr)
    print(f"saved: {probe.save(kept, out)}")
    return code


def drafter_backends(registry: Registry, dcls: type) -> list[str]:
    """The installed backends that run the drafter ``dcls``: those with the
    Drafting capability (the lab's own verify loop) on a stack the drafter
    drafts for. Servers draft with their own speculative types and run no
    drafter plugin."""
    stacks = getattr(dcls, "stacks", None)
    return sorted(name for name, cls in registry.backends.items()
                  if cls.accepts_drafters and (stacks is None or cls.stack in stacks))


def cmd_plugins(args: argparse.Namespace) -> int:
    from lab.plugins import load_registry
    from lab.textsafe import printable

    # names, descriptions and errors come from whatever plugins are installed
    def say(text: str) -> None:
        print(printable(text))

    registry = load_registry()
    say("backends:")
    for name, cls in sorted(registry.backends.items()):
        say(f"  {name}  [stack {cls.stack}{', runs drafters' if cls.accepts_drafters else ''}]  {cls.description}")
        for opt in cls.options:
            say(f"      {opt.describe()}")
    say("drafters (run by the lab's verify loop, on backends that run drafters; a server backend drafts "
        "with its own --spec-type instead):")
    for name, dcls in sorted(registry.drafters.items()):
        hosts = drafter_backends(registry, dcls)
        runs_on = f"runs on {', '.join(hosts)}" if hosts else "no installed backend runs it"
        say(f"  {name}  [{runs_on}]  {dcls.description}")
        for opt in dcls.options:
            say(f"      {opt.describe()}")
    from lab.profile.limits import describe_limits

    # what every profile is held to before an engine starts, beside the plugins' own ranges
    say("profile limits:")
    for key, bound in describe_limits().items():
        say(f"  {key}: {bound}")
    if registry.errors:
        say("load errors:")
        for err in registry.errors:
            say(f"  {err.entry_point} ({err.group}): {err.error}")
    return 1 if registry.errors and args.strict else 0


def cmd_new_drafter(args: argparse.Namespace) -> int:
    from lab.scaffold import ScaffoldError, write_drafter_package

    try:
        made = write_drafter_package(args.name, args.dir)
    except (ScaffoldError, OSError) as exc:
        print(f"lab: {exc}", file=sys.stderr)
        return 2
    for path in made.files:
        print(f"wrote {path}")
    print(f"\nnext: pip install -e {made.directory} && lab plugins && lab run {made.directory / (made.name + '.toml')}")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from lab.doctor import run_checks

    ok = True
    for check in run_checks():
        mark = "ok " if check.ok else "-- "
        print(f"{mark} {check.name}: {check.detail}")
        if not check.ok:
            ok = False if check.required else ok
            if check.fix:
                print(f"      fix: {check.fix}")
    return 0 if ok else 1


def cmd_tui(profile: str | None, refresh_hz: float | None = None) -> int:
    try:
        from lab.tui.app import run_app
    except ImportError as exc:
        print(f"lab: the TUI is not available ({exc}); use `lab run PROFILE`", file=sys.stderr)
        return 2
    return run_app(profile or str(default_profile()), refresh_hz)


def tui_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lab", description="Open the lab's TUI on a profile (default: profiles/demo.toml). "
        "Commands: run, report, plugins, doctor, probe (lab COMMAND -h).")
    p.add_argument("profile", nargs="?")
    p.add_argument(
        "--refresh-hz", type=float, metavar="HZ",
        help="how often lanes repaint while a run streams (default: 30, or 5 when the engine's threads "
        "take every core, so the view does not slow the engine it measures)")
    return p


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command parser; ``command`` names the one that will run, so the
    lossless check's statistics (numpy) load only for that command."""
    parser = argparse.ArgumentParser(
        prog="lab", description="speclab: a terminal lab for speculative decoding",
        epilog="Without a command, `lab [--refresh-hz HZ] [PROFILE.toml]` opens the TUI "
        "(default profile: profiles/demo.toml).")
    sub = parser.add_subparsers(dest="command")
    p = sub.add_parser("run", help="run a profile headless and save a run directory")
    p.add_argument("profile")
    p.add_argument("--out", help="parent directory of the run directory (default: runs/)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("check", help="validate a profile without loading a model (file:line and key for every problem)")
    p.add_argument("profile")
    p.set_defaults(func=cmd_check)
    p = sub.add_parser(
        "lossless",
        help="test at temperature > 0 that drafters keep the target's token distribution (speculative vs plain sampling)",
        description="Sample plain and speculative continuations of the same contexts and test that their "
        "token distributions agree (per position, Holm-corrected permutation tests).",
    )
    if command in (None, "lossless"):
        from lab import lossless

        lossless.add_arguments(p)
        p.set_defaults(func=lossless.main)
    p = sub.add_parser("report", help="render a saved run")
    p.add_argument("run_dir")
    p.add_argument("--format", choices=("md", "csv", "json"), default="md")
    p.add_argument("--compare", metavar="RUN_B", help="show what changed from RUN_DIR to RUN_B")
    p.add_argument("--probe", metavar="FILE", help="verify-cost probe for the prediction (default: RUN_DIR/probe.json)")
    p.add_argument("--bandwidth", type=float, metavar="GBPS", help="device memory bandwidth for the roofline, GB/s")
    p.set_defaults(func=cmd_report)
    p = sub.add_parser("probe", help="measure verify cost T(w) of a backend and model")
    p.add_argument("--backend", help="backend (default: the --arm's, else llamacpp)")
    p.add_argument("--model", help="model (default: the --arm's, else embedded:smollm2)")
    p.add_argument("--option", action="append", metavar="KEY=VALUE",
                   help="a backend option, as a profile arm's options take it (repeatable), e.g. n_gpu_layers=999")
    p.add_argument("--n-gpu-layers", type=int, metavar="N", help="short for --option n_gpu_layers=N")
    p.add_argument("--profile", metavar="FILE", help="take backend, model, options and threads from an arm of this profile")
    p.add_argument("--arm", metavar="NAME", help="the --profile arm (default: its first speculative arm)")
    p.add_argument("--widths", default="1-16", help="widths to verify, e.g. 1-16 or 1,2,4,8 (1 is always added)")
    p.add_argument("--method", help="how to measure (llamacpp: decode, decode-interleaved, batched-bench); "
                   "default: the backend's first")
    p.add_argument("--repeats", type=int, default=3, help="measurements for min/median/max (default 3)")
    p.add_argument("--threads", type=int, default=0, help="engine threads (default: the backend's)")
    p.add_argument("--out", help="save the probe as JSON here (a file, or a run directory: RUN/probe.json)")
    p.add_argument("--no-bandwidth", action="store_true", help="skip the memory-bandwidth measurement")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=cmd_probe)
    p = sub.add_parser("plugins", help="list backends, drafters and plugin load errors")
    p.add_argument("--strict", action="store_true", help="exit 1 when a plugin failed to load")
    p.set_defaults(func=cmd_plugins)
    p = sub.add_parser("new-drafter", help="write a minimal drafter plugin package to start from",
                       description="Write a complete drafter plugin package (pyproject.toml with the lab.drafters "
                       "entry point, a module with a working Drafter, a profile, a README): pip install -e it, "
                       "then lab plugins lists it and lab run NAME.toml runs it.")
    p.add_argument("name", help="the drafter's name, as profiles will spell it (drafter = \"NAME\")")
    p.add_argument("--dir", help="where to write it (default: ./lab-NAME-drafter; must not exist or be empty)")
    p.set_defaults(func=cmd_new_drafter)
    p = sub.add_parser("doctor", help="check engines, tools and models")
    p.set_defaults(func=cmd_doctor)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    commands = {"run", "check", "lossless", "report", "plugins", "doctor", "probe", "new-drafter", "-h", "--help"}
    if not args_list or args_list[0] not in commands:
        tui_args = tui_parser().parse_args(args_list)
        if tui_args.profile and not os.path.exists(tui_args.profile):
            print(f"lab: no such profile or command: {tui_args.profile}", file=sys.stderr)
            return 2
        if tui_args.profile and os.path.isdir(tui_args.profile):
            print(f"lab: {tui_args.profile}: is a directory, not a profile file (lab [PROFILE.toml])",
                  file=sys.stderr)
            return 2
        if tui_args.refresh_hz is not None and not 0 < tui_args.refresh_hz <= 120:
            print("lab: --refresh-hz must be above 0 and at most 120", file=sys.stderr)
            return 2
        return _plugin_errors_end_in_a_message(lambda: cmd_tui(tui_args.profile, tui_args.refresh_hz))
    parser = build_parser(args_list[0])
    args = parser.parse_args(args_list)
    return _plugin_errors_end_in_a_message(lambda: int(args.func(args)))


def _plugin_errors_end_in_a_message(command: Callable[[], int]) -> int:
    """LAB_PLUGINS_STRICT=1 makes a plugin that fails to load fatal: the
    command ends there with the plugin and its error, exit 2."""
    try:
        return command()
    except Exception as exc:
        from lab.plugins import PluginLoadError
        from lab.textsafe import printable

        if not isinstance(exc, PluginLoadError):
            raise
        print(f"lab: {printable(exc)} (LAB_PLUGINS_STRICT is set)", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
