"""Open a profile (profiles/*.toml) or a saved run (runs/*/results.json)."""

from __future__ import annotations

import sys
from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Header, Label, OptionList
from textual.widgets.option_list import Option

from lab.base import rundir
from lab.store import MAX_RESULTS_BYTES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

Choice = tuple[str, str]  # ("profile" | "run", path)


def list_profiles(folder: Path) -> list[tuple[Path, str]]:
    out = []
    for path in sorted(folder.glob("*.toml")):
        try:
            meta = tomllib.loads(path.read_text(encoding="utf-8")).get("profile", {})
            desc = str(meta.get("description", "")) if isinstance(meta, dict) else ""
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            desc = f"(unreadable: {exc})"
        out.append((path, desc))
    return out


def list_runs(folder: Path, limit: int = 20) -> list[tuple[Path, str]]:
    runs = [rundir.located(d / rundir.RESULTS_FILE) for d in folder.iterdir() if rundir.is_run_dir(d)] \
        if folder.is_dir() else []
    runs.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    out = []
    for path in runs[:limit]:
        try:
            data, _ = rundir.read_json(path, MAX_RESULTS_BYTES, "results file")
            n = len(data.get("results", []))
            state = "cancelled" if data.get("cancelled") else ("finished" if data.get("finished") else "unfinished")
            desc = f"{data.get('profile', {}).get('name', '?')} · {n} results · {state}"
        except (OSError, ValueError, AttributeError) as exc:
            desc = f"(unreadable: {exc})"
        out.append((path.parent, desc))
    return out


class PickerScreen(Screen[Choice | None]):
    BINDINGS = [Binding("escape", "cancel", "Back")]

    def __init__(self, profiles_dir: Path, runs_dir: Path, *, runs_only: bool = False, title: str = "") -> None:
        """``runs_only``: saved runs alone (picking one to compare with)."""
        super().__init__()
        self.profiles_dir = profiles_dir
        self.runs_dir = runs_dir
        self.runs_only = runs_only
        self.title_text = title or f"Open a profile ({profiles_dir}) or a saved run ({runs_dir}, read-only)"
        self.choices: dict[str, Choice] = {}

    def compose(self) -> ComposeResult:
        yield Header()
        yield Label(self.title_text, id="picker-title", markup=False)
        options: list[Option | None] = []
        if not self.runs_only:
            options.append(Option("[b]Profiles[/b]", disabled=True))
            for i, (path, desc) in enumerate(list_profiles(self.profiles_dir)):
                key = f"profile-{i}"
                self.choices[key] = ("profile", str(path))
                options.append(Option(f"  {path.name}  [dim]{desc}[/dim]", id=key))
            options.append(None)
        options.append(Option("[b]Recent runs[/b]", disabled=True))
        for i, (path, desc) in enumerate(list_runs(self.runs_dir)):
            key = f"run-{i}"
            self.choices[key] = ("run", str(path))
            options.append(Option(f"  {path.name}  [dim]{desc}[/dim]", id=key))
        yield OptionList(*options, id="picker")
        yield Footer()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option.id in self.choices:
            self.dismiss(self.choices[event.option.id])

    def action_cancel(self) -> None:
        self.dismiss(None)
