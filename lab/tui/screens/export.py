"""Export the comparison as Markdown, CSV or JSON to a chosen path."""

from __future__ import annotations

from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, RadioButton, RadioSet

DEFAULT_NAMES = {"md": "report.md", "csv": "comparison.csv", "json": "comparison.json"}


class ExportScreen(ModalScreen[tuple[str, str] | None]):
    """Returns (format, path) or None."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]
    # enter exports at once; tab reaches the format and the buttons
    AUTO_FOCUS = "#export-path"

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder
        self.fmt = "md"

    def compose(self) -> ComposeResult:
        with Vertical(id="export-box"):
            yield Label("Export the comparison")
            with RadioSet(id="export-format"):
                yield RadioButton("Markdown", value=True, id="fmt-md")
                yield RadioButton("CSV", id="fmt-csv")
                yield RadioButton("JSON", id="fmt-json")
            yield Input(str(self.folder / DEFAULT_NAMES["md"]), id="export-path")
            with Horizontal(id="export-buttons"):
                yield Button("Export", variant="primary", id="export-ok")
                yield Button("Cancel", id="export-cancel")

    @on(RadioSet.Changed)
    def _format_changed(self, event: RadioSet.Changed) -> None:
        self.fmt = (event.pressed.id or "fmt-md").removeprefix("fmt-")
        field = self.query_one("#export-path", Input)
        current = Path(field.value)
        if current.name in DEFAULT_NAMES.values():
            field.value = str(current.parent / DEFAULT_NAMES[self.fmt])

    @on(Button.Pressed, "#export-ok")
    @on(Input.Submitted)
    def _ok(self) -> None:
        self.dismiss((self.fmt, self.query_one("#export-path", Input).value))

    @on(Button.Pressed, "#export-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
