"""Export the comparison as Markdown, CSV or JSON to a chosen path.

Focus starts on the format (`e` Enter writes ``export.md`` beside the run's
files, or the next free name); Tab reaches the path. A blank file name is
refused in the dialog, and so is any file the run directory already holds
(report.md, results.json...): an export never replaces the run's evidence.
A file elsewhere that exists is replaced only after a second Enter. What is
written is what ``lab report RUN_DIR --format F`` prints."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, RadioButton, RadioSet, Static

SUFFIXES = {"md": ".md", "csv": ".csv", "json": ".json"}
DEFAULT_STEM = "export"


def default_path(folder: Path, fmt: str) -> Path:
    """``export.md`` (or .csv, .json) in ``folder``, else the first of
    ``export-2.md``, ``export-3.md``... that is free."""
    suffix = SUFFIXES[fmt]
    path = folder / f"{DEFAULT_STEM}{suffix}"
    n = 2
    while path.exists():
        path = folder / f"{DEFAULT_STEM}-{n}{suffix}"
        n += 1
    return path


def _is_default(path: Path) -> bool:
    stem = path.stem
    return path.suffix in SUFFIXES.values() and (
        stem == DEFAULT_STEM or (stem.startswith(f"{DEFAULT_STEM}-") and stem[len(DEFAULT_STEM) + 1:].isdigit()))


def path_problem(text: str, run_dir: Path | None = None) -> str:
    """Why ``text`` is no file to export to ("" when it is one): no name, a
    folder, or a file the run directory already holds."""
    if not text.strip():
        return "give a path to export to"
    path = Path(text).expanduser()
    if text.endswith(("/", "\\")) or path.is_dir():
        return f"{path} is a folder: add a file name"
    if not path.name.strip():
        return "the file name is blank"
    if run_dir is not None and path.exists() and _inside(path, run_dir):
        return f"{path.name} is one of the run's own files: export to a new name"
    return ""


def _inside(path: Path, folder: Path) -> bool:
    try:
        return path.resolve().is_relative_to(folder.resolve())
    except OSError:
        return False


def export_text(run_dir: Path, fmt: str) -> str:
    """The export of a run directory: exactly what ``lab report RUN_DIR
    --format FMT`` prints (its steps and probe attached, its text made safe
    for a terminal)."""
    from lab.base.textsafe import printable
    from lab.render.report import load_for_report, render

    return printable(render(load_for_report(run_dir), fmt), keep="\n\t")


class FormatButton(RadioButton):
    """A format choice whose mark says which one is chosen without colour:
    ● for the chosen one, ○ for the others."""

    @property
    def BUTTON_INNER(self) -> str:  # type: ignore[override]  # Textual's name
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

    def __init__(self, folder: Path, run_dir: Path | None = None) -> None:
        """``folder``: where the default name goes; ``run_dir``: the run
        whose files are never replaced (the folder itself by default)."""
        super().__init__()
        self.folder = folder
        self.run_dir = run_dir if run_dir is not None else folder
        self.fmt = "md"
        # the existing file a first Enter asked about: a second one replaces it
        self._asked: Path | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="export-box"):
            yield Label("[b]Export the comparison[/b]", id="export-title")
            yield Label("[dim]↑ ↓ format · enter exports · tab: path · esc cancels[/dim]", id="export-keys")
            with RadioSet(id="export-format"):
                yield FormatButton("Markdown", value=True, id="fmt-md")
                yield FormatButton("CSV", id="fmt-csv")
                yield FormatButton("JSON", id="fmt-json")
            yield Input(str(default_path(self.folder, "md")), id="export-path", select_on_focus=False)
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
        if _is_default(current):
            field.value = str(default_path(current.parent, self.fmt))

    def _take_highlighted_format(self) -> None:
        """On the format list, the highlighted format is the one meant."""
        formats = self.query_one("#export-format", RadioSet)
        if not formats.has_focus:
            return
        index = formats._selected  # noqa: SLF001 - the highlighted button: Textual keeps no public name for it
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
        problem = path_problem(text, self.run_dir)
        if problem:
            self._say(f"[b red]{escape(problem)}[/b red]")
            return
        path = Path(text).expanduser()
        if path.exists() and path != self._asked:
            self._asked = path
            self._say(f"[b]{escape(path.name)} exists: enter again to replace it[/b]")
            return
        self.dismiss((self.fmt, text))

    def _say(self, markup: str) -> None:
        self.query_one("#export-problem", Static).update(markup)

    @on(Button.Pressed, "#export-ok")
    def _ok(self) -> None:
        self.action_export()

    @on(Button.Pressed, "#export-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
