"""Plots of one arm in the terminal: accepted length per step, step cost
over time, tok/s over time. Their labels and per-step series are the saved
figures' (lab.render.figure_data), so a plot here and a figure of the same
run show the same numbers under the same words."""

from __future__ import annotations

import math
from typing import Any

from textual.app import ComposeResult, RenderResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Static
from textual_plotext import PlotextPlot

from lab.render import figure_data as fd
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


def title_for(width: int, *titles: str) -> str:
    """The first of ``titles`` (longest first) that fits a plot ``width``
    cells wide; plotext leaves out a title it cannot fit."""
    return next((t for t in titles if len(t) <= width - 4), titles[-1])


class TitledPlot(PlotextPlot):
    """A plot whose title is the longest of its candidates that fits the
    width it renders at (a draw can come before the layout that sizes it)."""

    titles: tuple[str, ...] = ("",)

    def set_titles(self, *titles: str) -> None:
        self.titles = titles

    def cleared(self, *titles: str) -> Any:
        self.plt.clear_data()
        self.plt.clear_figure()
        self.set_titles(*titles)
        return self.plt

    def render(self) -> RenderResult:
        self.plt.title(title_for(self.size.width, *self.titles))
        return super().render()


class AcceptedLengthPlot(TitledPlot):
    """Histogram of tokens landed per speculative step (accepted + 1)."""

    def draw(self, series: ArmSeries | None) -> None:
        plt = self.cleared(fd.LANDED_TITLE, "tokens/step")
        if series is None or not series.landed:
            plt.xlabel("no speculative steps")
        else:
            hist = fd.landed_histogram(series.landed, series.max_yield)
            counts = [c for _, c in hist]
            plt.bar([str(n) for n, _ in hist], counts)
            ticks = count_ticks(max(counts))
            plt.ylim(0, ticks[-1])
            plt.yticks(ticks)
            plt.xlabel(f"{len(series.landed)} steps")
        self.refresh()


class StepCostPlot(TitledPlot):
    """Step seconds in baseline-token equivalents, step by step, against the
    most a step can land; in milliseconds while no baseline is known."""

    def draw(self, series: ArmSeries | None, base_tok_per_s: float | None) -> None:
        plt = self.cleared("step cost")
        if series is None or not series.step_s:
            plt.xlabel("no speculative steps")
            self.refresh()
            return
        if base_tok_per_s:
            self.set_titles(fd.STEP_COST_TITLE, "step cost (base tok)", "step cost")
            ys = [c or 0.0 for c in fd.step_costs(series.step_s, base_tok_per_s)]
        else:
            self.set_titles(fd.STEP_COST_MS_TITLE, "step cost (ms)")
            ys = [s * 1000 for s in series.step_s]
        xs = list(range(1, len(ys) + 1))
        plt.plot(xs, ys, marker="braille")
        plt.xticks(count_ticks(len(xs))[1:] or [1])
        axis = fd.STEP_AXIS
        if base_tok_per_s and series.max_yield:
            plt.hline(series.max_yield, "red")
            axis += f" · {fd.MAX_YIELD_LABEL} {series.max_yield}"
        plt.xlabel(axis)
        self.refresh()


class TokRatePlot(TitledPlot):
    """tok/s over generation time, cell after cell."""

    def draw(self, series: ArmSeries | None) -> None:
        plt = self.cleared(fd.TOK_RATE_TITLE, "tok/s")
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
