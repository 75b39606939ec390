"""A failure as a modal: what failed and the engine's log excerpt."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static


class ErrorScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,enter", "dismiss", "Close")]

    def __init__(self, title: str, detail: str) -> None:
        super().__init__()
        self.title_text = title
        self.detail = detail

    def compose(self) -> ComposeResult:
        with Vertical(id="error-box"):
            yield Label(self.title_text, id="error-title")
            with VerticalScroll(id="error-detail"):
                yield Static(self.detail, markup=False)
            yield Button("Close", variant="error", id="error-close")

    def on_button_pressed(self) -> None:
        self.dismiss()

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)
