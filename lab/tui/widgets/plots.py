"""Plots of one arm in the terminal: accepted length per step, step cost
over time, tok/s over time."""

from __future__ import annotations

import math

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Static
from textual_plotext import PlotextPlot

from lab.base import metrics
from lab.tui.series import ArmSeries


def count_ticks(top: float, most: int = 5) -> list[float]:
    """Whole-number ticks from 0 past ``top``, 1, 2 or 5 times a power of ten
    apart, at most ``most`` steps: an axis of counts (steps, occurrences)
    never shows 2.5."""
    top = max(1, math.ceil(top))
    scale = 1
    while True:
        for m in (1, 2, 5):
            step = m * scale
            n = math.ceil(top / step)
            if n <= most:
                ticks: list[float] = [t for t in range(0, n * step + 1, step)]  # ints: labels read 2, not 2.0
                return ticks
        scale *= 10


class AcceptedLengthPlot(PlotextPlot):
    """Histogram of tokens landed per speculative step (accepted + 1)."""

    def draw(self, series: ArmSeries | None) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title("tokens landed per step")
        if series is None or not series.landed:
            plt.xlabel("no speculative steps")
        else:
            hist = series.histogram()
            counts = [c for _, c in hist]
            plt.bar([str(n) for n, _ in hist], counts)
            ticks = count_ticks(max(counts))
            plt.ylim(0, ticks[-1])
            plt.yticks(ticks)
            plt.xlabel(f"{len(series.landed)} steps")
        self.refresh()


class StepCostPlot(PlotextPlot):
    """Step seconds in baseline-token equivalents, step by step, against the
    most a step can land; in milliseconds while no baseline is known."""

    def draw(self, series: ArmSeries | None, base_tok_per_s: float | None) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        if series is None or not series.step_s:
            plt.title("step cost")
            plt.xlabel("no speculative steps")
        elif base_tok_per_s:
            plt.title("step cost (baseline tokens)")
            xs = list(range(1, len(series.step_s) + 1))
            plt.plot(xs, [metrics.step_cost_tokens(s, base_tok_per_s) or 0.0 for s in series.step_s], marker="braille")
            plt.xticks(count_ticks(len(xs))[1:] or [1])
            if series.max_yield:
                plt.hline(series.max_yield, "red")
            plt.xlabel("step" + (f" · max yield {series.max_yield}" if series.max_yield else ""))
        else:
            plt.title("step cost (ms, no baseline yet)")
            xs = list(range(1, len(series.step_s) + 1))
            plt.plot(xs, [s * 1000 for s in series.step_s], marker="braille")
            plt.xticks(count_ticks(len(xs))[1:] or [1])
            plt.xlabel("step")
        self.refresh()


class TokRatePlot(PlotextPlot):
    """tok/s over generation time, cell after cell."""

    def draw(self, series: ArmSeries | None) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title("tok/s over time")
        if series is None or not series.rate:
            plt.xlabel("no tokens yet")
        else:
            plt.plot([x for x, _ in series.rate], [y for _, y in series.rate], marker="braille")
            plt.xlabel("seconds")
        self.refresh()


class PlotArmLabel(Static):
    """Which arm the plots show and how to switch."""


class ArmPlots(Vertical):
    """The three plots for the arm chosen with ``a`` (next arm)."""

    def compose(self) -> ComposeResult:
        yield PlotArmLabel("")
        with Horizontal():
            yield AcceptedLengthPlot()
            yield StepCostPlot()
            yield TokRatePlot()

    def draw(self, arm: str | None, series: ArmSeries | None, base_tok_per_s: float | None) -> None:
        self.query_one(PlotArmLabel).update(
            f"plots of [b]{arm or '—'}[/b]  [dim](a: next arm)[/dim]"
        )
        self.query_one(AcceptedLengthPlot).draw(series)
        self.query_one(StepCostPlot).draw(series, base_tok_per_s)
        self.query_one(TokRatePlot).draw(series)
