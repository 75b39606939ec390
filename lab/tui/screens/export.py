"""Export the comparison as Markdown, CSV or JSON to a chosen path.

Focus starts on the format (`e` Enter writes report.md); Tab reaches the
path; a blank file name is refused in the dialog."""

from __future__ import annotations

from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, RadioButton, RadioSet, Static

DEFAULT_NAMES = {"md": "report.md", "csv": "comparison.csv", "json": "comparison.json"}


def path_problem(text: str) -> str:
    """Why ``text`` is no file to export to ("" when it is one)."""
    if not text.strip():
        return "give a path to export to"
    path = Path(text).expanduser()
    if text.endswith(("/", "\\")) or path.is_dir():
        return f"{path} is a folder: add a file name"
    if not path.name.strip():
        return "the file name is blank"
    return ""


class FormatButton(RadioButton):
    """A format choice whose mark says which one is chosen without colour:
    ● for the chosen one, ○ for the others."""

    @property
    def BUTTON_INNER(self) -> str:  # type: ignore[override]  # noqa: N802 - Textual's name
        return "●" if self.value else "○"


class ExportScreen(ModalScreen[tuple[str, str] | None]):
    """Returns (format, path) or None."""

    BINDINGS = [
        Binding("escape", "cancel", "Cancel"),
        # Enter exports from anywhere in the dialog (on the format list it
        # takes the highlighted format first)
        Binding("enter", "export", "Export", priority=True),
    ]
    AUTO_FOCUS = "#export-format"

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder
        self.fmt = "md"

    def compose(self) -> ComposeResult:
        with Vertical(id="export-box"):
            yield Label("[b]Export the comparison[/b]", id="export-title")
            yield Label("[dim]↑ ↓ format · enter exports · tab: path · esc cancels[/dim]", id="export-keys")
            with RadioSet(id="export-format"):
                yield FormatButton("Markdown", value=True, id="fmt-md")
                yield FormatButton("CSV", id="fmt-csv")
                yield FormatButton("JSON", id="fmt-json")
            yield Input(str(self.folder / DEFAULT_NAMES["md"]), id="export-path", select_on_focus=False)
            yield Static("", id="export-problem")
            with Horizontal(id="export-buttons"):
                yield Button("Export", variant="primary", id="export-ok")
                yield Button("Cancel", id="export-cancel")

    @on(RadioSet.Changed)
    def _format_changed(self, event: RadioSet.Changed) -> None:
        self._set_format((event.pressed.id or "fmt-md").removeprefix("fmt-"))

    def _set_format(self, fmt: str) -> None:
        self.fmt = fmt
        field = self.query_one("#export-path", Input)
        current = Path(field.value)
        if current.name in DEFAULT_NAMES.values():
            field.value = str(current.parent / DEFAULT_NAMES[self.fmt])

    def _take_highlighted_format(self) -> None:
        """On the format list, the highlighted format is the one meant."""
        formats = self.query_one("#export-format", RadioSet)
        if not formats.has_focus:
            return
        index = formats._selected  # the highlighted button (Textual keeps no public name for it)
        buttons = list(formats.query(RadioButton))
        if index is not None and 0 <= index < len(buttons) and not buttons[index].value:
            buttons[index].value = True  # RadioSet.Changed follows; set the format now too
            self._set_format((buttons[index].id or "fmt-md").removeprefix("fmt-"))

    def action_export(self) -> None:
        if self.query_one("#export-cancel", Button).has_focus:
            self.dismiss(None)
            return
        self._take_highlighted_format()
        text = self.query_one("#export-path", Input).value
        problem = path_problem(text)
        if problem:
            self.query_one("#export-problem", Static).update(f"[b red]{problem}[/b red]")
            return
        self.dismiss((self.fmt, text))

    @on(Button.Pressed, "#export-ok")
    def _ok(self) -> None:
        self.action_export()

    @on(Button.Pressed, "#export-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
