"""Installed backends and drafters, their options, and plugins that failed
to load. The tables name each plugin's options; under each table, the
highlighted plugin's options in full (type, range, choices, default, help:
Option.describe())."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Label, Static

from lab.api import Backend, Drafter
from lab.registry import Registry


def _options(cls: type[Backend] | type[Drafter]) -> str:
    return ", ".join(o.name for o in cls.options) or "—"


def options_text(kind: str, name: str, cls: type[Backend] | type[Drafter]) -> str:
    """Every option of a plugin described in full, one a line."""
    if not cls.options:
        return f"{kind} {name}: no options"
    return f"{kind} {name}, options:\n" + "\n".join(f"  {o.describe()}" for o in cls.options)


class OptionsDetail(Static):
    """The highlighted plugin's options in full."""


class PluginsScreen(Screen[None]):
    BINDINGS = [Binding("escape,f2", "app.pop_screen", "Back")]
    # the backends table, not the scrolling page around it (focusable once
    # the plugins overflow it): ↑ ↓ pick a backend at once
    AUTO_FOCUS = "#backends"

    def __init__(self, registry: Registry) -> None:
        super().__init__()
        self.registry = registry

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(id="plugins"):
            yield Label("Backends", classes="section")
            yield DataTable(id="backends", cursor_type="row")
            yield OptionsDetail("", id="backend-options", markup=False)
            yield Label("Drafters", classes="section")
            yield DataTable(id="drafters", cursor_type="row")
            yield OptionsDetail("", id="drafter-options", markup=False)
            yield Label("Load errors", classes="section")
            if self.registry.errors:
                for err in self.registry.errors:
                    last = err.traceback.strip().splitlines()[-3:] if err.traceback else []
                    yield Static(
                        f"{err.entry_point} ({err.group}): {err.error}" + ("\n" + "\n".join(last) if last else ""),
                        classes="load-error", markup=False,
                    )
            else:
                yield Static("none", classes="no-errors")
        yield Footer()

    def on_mount(self) -> None:
        reg = self.registry
        backends = self.query_one("#backends", DataTable)
        backends.add_columns("name", "stack", "drafters", "from", "options", "description")
        for name, cls in sorted(reg.backends.items()):
            backends.add_row(name, cls.stack, "yes" if cls.accepts_drafters else "no",
                             reg.origins.get(f"backend:{name}", ""), _options(cls), cls.description, key=name)
        drafters = self.query_one("#drafters", DataTable)
        # which backends really run each drafter: those with the Drafting
        # capability on its stacks (servers draft with their own types)
        drafters.add_columns("name", "runs on", "from", "options", "description")
        for name, dcls in sorted(reg.drafters.items()):
            stacks = ", ".join(reg.drafter_backends(dcls)) or "no installed backend"
            drafters.add_row(name, stacks, reg.origins.get(f"drafter:{name}", ""), _options(dcls),
                             dcls.description, key=name)

    @on(DataTable.RowHighlighted)
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        name = str(event.row_key.value)
        if event.data_table.id == "backends" and name in self.registry.backends:
            self.query_one("#backend-options", Static).update(
                options_text("backend", name, self.registry.backends[name]))
        elif event.data_table.id == "drafters" and name in self.registry.drafters:
            self.query_one("#drafter-options", Static).update(
                options_text("drafter", name, self.registry.drafters[name]))
