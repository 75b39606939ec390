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
text as it lands. **Bold green** text came from drafted tokens the target
accepted; plain text is what the target produced itself.

| key | does |
|---|---|
| `s` | start the run |
| `p` | pause / resume: holds at the next step of an in-process engine (the held time is taken out of the cell's tok/s), before the next cell for a server |
| `c` | cancel the selected arm (now if running; a pending arm is never loaded) |
| `n` | skip the running arm, go to the next |
| `x` | stop the whole run |
| `←` `→` `a` | select a lane; the plots follow the selection |
| `w` | save the comparison into the run directory (report.md, comparison.csv) |
| `e` | export Markdown, CSV or JSON |
| `o` | open a profile or a saved run (read-only) |
| `f2` | plugins: backends, drafters, load errors |
| `ctrl+p` | command palette |
| `q` | quit (stops every engine first) |

A run writes the same run directory as `lab run`: `runs/<time>-<profile>/`.
A reopened run shows each cell's text with its drafted tokens marked.

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
