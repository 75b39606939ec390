"""Keys and what they do."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

HELP = """\
# speclab

Each arm runs in turn (one engine loaded at a time); its lane streams the
text as it lands, and the lane on show follows the running arm until you
pick another (picking the running arm's lane follows again). **Bold green**
text came from drafted tokens the target accepted; plain text is what the
target produced itself; a red `✗n` marks where a step rejected n drafted
tokens (before the token the target put in their place; no part of the
text). A speculative lane's bottom border repeats this legend.

Under the text: `tok/s`; `accept` (accepted / drafted) and `tok/step`
(tokens landed per step); the last step's draft and verify time while the
cell runs, the mean per step once it finished; memory. While a cell runs,
`first token after` counts from the cell's start to its first token,
everything before it included (an oracle's rehearsal passes too); once it
finished, `ttft` is the report's figure, those passes taken out (shown
beside it). `itl p50` / `p95` are the report's gaps between tokens: tokens
landing in a burst of accepted drafts have no gap, so a speculative arm's
median is often 0 ms and its p95 shows a step's cost.

| key | does |
|---|---|
| `s` | start the run (a profile opens ready, waiting for this key) |
| `p` | pause; while paused the same key resumes (the footer says which). A pause holds at the next step of an in-process engine (the held time is taken out of the cell's tok/s), before the next cell for a server |
| `c` | cancel the selected arm (now if running; a pending arm is never loaded): its cells are `cancelled` |
| `n` | skip the running arm, go to the next: its cells are `skipped` |
| `x` | stop the whole run: every cell left is `cancelled` |
| `←` `→` | select a lane, whatever has focus; the plots follow the selection (`a` too). Below 120 columns one lane shows at a time and these switch it (the line above it names every arm and its status) |
| `1` `2` `3` | show the comparison table, the plots, the per-category table |
| `tab` | move the focus between the tables (the comparison table has it from the start and whenever its view shows; `↑` `↓` move its cursor) |
| `w` | save the comparison into the directory of the run you ran (report.md, comparison.csv); a saved run is saved already |
| `e` | export Markdown, CSV or JSON, what `lab report` prints, under a new name |
| `↑` `↓` in the table | once no run streams (a saved run, a finished one): the highlighted row's cell shows in its arm's lane, its text against the baseline's for the same prompt and round |
| `r` | that cell's next round |
| `m` | compare this run with another saved run, side by side (what `lab report A --compare B` says; `lab --compare A B` opens it directly) |
| `o` | open a profile or a saved run (read-only; `lab RUN_DIR` opens one from the shell) |
| `escape` | back: close a saved run, a dialog, this help |
| `f2` | plugins: backends, drafters, load errors |
| `ctrl+p` | command palette: every action above, by name |
| `q` | quit (stops every engine first) |

The comparison's verdict takes the width the other columns leave, one line
a row: in full where it fits, else abbreviated to its kind and figures; the
highlighted row's verdict is always written in full under the table, with
whatever the table left out of that row. A narrow table gives way in this
order: the tok/s range over rounds, then peak mem, identical, mean len,
cost/yield, accept. The footer always keeps Quit and Help; the run header is
one line, shortened (the run directory goes first).

Before the arms, a run measures (or finds cached) the verify cost of each
stack that speculates: the probe line says which, and the lanes wait. The
probe measures in a process of its own, which `q` and `x` end at once (what
it had measured is not kept).

Export (`e`): `↑` `↓` choose the format, `enter` exports to the path shown
(`export.md` beside the run's files, or the next free name); `tab` reaches
the path. The run's own files are never replaced; a file elsewhere that
exists is replaced on a second `enter`.
Cancelled and skipped cells were stopped, not measured: they are never
counted as failures.

A run writes the same run directory as `lab run`: `runs/<time>-<profile>/`.
A reopened run shows each cell's text with its drafted tokens marked; where
it differs from its baseline's text, the common prefix is plain, `▶` marks
the first divergence, and the words the baseline does not have there are
marked in red. When the run samples a GPU, each lane shows its memory,
utilization and power live.

Lanes repaint 30 times a second, or 5 when the engine's threads take every
core (the header says so): each repaint costs the UI thread a few
milliseconds, taken from the engine it measures. `lab --refresh-hz HZ`
sets the rate.
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,f1,question_mark", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Markdown(HELP)

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)
