"""What ``lab run`` prints: a line per phase change and per finished cell
while the run goes, and the comparison table at the end."""

from __future__ import annotations

from typing import Sequence, TextIO

from lab.analysis.run import summarize
from lab.base.events import Finished, ReferenceMeasured, RunEvent, RunStarted, Status, StatusChanged, finished_row
from lab.base.probe import ProbeReported
from lab.base.row import ResultRow
from lab.base.verdict import busy_warning
from lab.kit.prompting import FALLBACK


class Progress:
    """Headless progress, a listener of the run: one line per phase change
    (a phase says what the engine does, else the status does) and per
    finished cell; a phase said again for the same cell is not repeated."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._said: dict[object, str] = {}
        self._fallback_said: set[str] = set()

    def __call__(self, event: RunEvent) -> None:
        if isinstance(event, RunStarted):
            self.out.write(f"run {event.profile}: {len(event.arms)} arms x {len(event.prompts)} prompts x {event.rounds} rounds -> {event.run_dir}\n")
            t = event.threads
            if t is not None and t["used"] < t["cores"]:
                self.out.write(f"  threads = 0: {t['used']} of {t['cores']} cores, other processes kept "
                               f"{t['others_cores']:.2f} busy as the run started\n")
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
        elif isinstance(event, ReferenceMeasured):
            self.out.write(f"  [{event.arm}] reference: {reference_words(event)}\n")
        else:
            return
        self.out.flush()

    def _finished(self, r: ResultRow) -> None:
        where = f"[{r.arm} {r.prompt} r{r.round}]"
        if not r.ok:
            lines = r.detail.splitlines()[:1]
            self.out.write(f"  {where} {r.status.value} {lines[0] if lines else ''}\n")
            return
        if r.prompt_template == FALLBACK and r.arm not in self._fallback_said:
            self._fallback_said.add(r.arm)
            self.out.write(f"  [{r.arm}] warning: {r.model or 'its model'} has no chat template; prompts go through the "
                           "lab's ChatML fallback (chat_template = false sends the text as written)\n")
        extra = ""
        if r.degenerate_output:
            self.out.write(f"  {where} warning: degenerate output, {r.degenerate_output}\n")
        if r.acceptance_rate is not None:
            extra = f", accept {r.acceptance_rate * 100:.0f}%, len {r.mean_accepted_len or 0:.2f}"
        if r.speedup is not None:
            extra += f", {r.speedup:.2f}x"
        self.out.write(f"  {where} {r.n_tokens} tokens, {r.tok_per_s or 0:.1f} tok/s{extra}\n")


def reference_words(event: ReferenceMeasured) -> str:
    rec = event.record
    if not event.done:
        return f"measuring {rec.get('tool')} on {rec.get('prompt')}"
    if rec.get("error"):
        return f"{rec.get('tool')}: {rec['error']}"
    return f"{rec.get('tool')} {rec.get('n_tokens')}: {float(rec.get('tok_per_s') or 0):.1f} tok/s ({rec.get('seconds')} s)"


def table(rows: Sequence[ResultRow], paired: bool = True) -> str:
    """The comparison ``lab run`` prints at the end; ``paired``: the run's
    cells ran beside their baselines' (``[run] order = "paired"``)."""
    head = ["arm", "prompt", "tok/s", "speedup", "accept", "len", "cost/yield", "identical", "verdict"]
    lines = [head]
    for s in summarize(rows, paired):
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
