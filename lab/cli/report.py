"""``lab report RUN_DIR``: a saved run rendered again (Markdown, CSV, JSON
or one HTML page with its figures), alone or against a second run."""

from __future__ import annotations

import argparse
import sys

from lab.analysis.compare import warnings
from lab.base.probe import ProbeError
from lab.base.textsafe import printable
from lab.cli.context import Context
from lab.render.compare import render_compare
from lab.render.report import load_for_report, render
from lab.rows.shape import Problems
from lab.store import load_run


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir")
    p.add_argument("--format", choices=("md", "csv", "json", "html"), default="md",
                   help="html: one self-contained page, figures inline (opens offline)")
    p.add_argument("--figures", action="store_true",
                   help="(re)draw the run's figures into RUN_DIR/figures/ (SVG and PNG) and link them")
    p.add_argument("--compare", metavar="RUN_B", help="show what changed from RUN_DIR to RUN_B")
    p.add_argument("--probe", metavar="FILE", help="verify-cost probe for the prediction (default: RUN_DIR/probe.json)")
    p.add_argument("--bandwidth", type=float, metavar="GBPS", help="device memory bandwidth for the roofline, GB/s")


def run(args: argparse.Namespace, ctx: Context) -> int:
    try:
        data = load_for_report(args.run_dir, args.probe)
        if args.bandwidth:
            data["bandwidth_bytes_s"] = args.bandwidth * 1e9
        if args.figures and not args.compare:
            from lab.render.report import write_figures

            data["figure_lines"] = write_figures(args.run_dir, data)
        if args.format == "html":
            from lab.render import html

            if args.compare:
                data_b = load_for_report(args.compare)
                _say_unreadable(data_b)
                text = html.render_compare_html(data, data_b)
            else:
                text = html.render_html(data)
        elif args.compare:
            data_b = load_run(args.compare)
            _say_unreadable(data_b)
            text = render_compare(data, data_b, args.format)
            if args.format == "csv":  # Markdown and JSON carry them; a CSV is cells only
                for line in warnings(data, data_b):
                    print(f"lab: warning: {printable(line)}", file=sys.stderr)
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
    found = data.get("unreadable")
    for line in Problems(found if isinstance(found, list) else []).lines():
        print(f"lab: not used: {printable(line)}", file=sys.stderr)
