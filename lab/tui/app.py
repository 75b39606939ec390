"""The lab's Textual app: `lab` opens it on profiles/demo.toml, `lab
PROFILE.toml` on another profile, `lab RUN_DIR` on a saved run.

The runner runs on a thread worker and reaches the screen only as messages
(bridge.py); quitting cancels the run and waits for every engine to close."""

from __future__ import annotations

import asyncio
import gc
import signal
import sys
import traceback
from pathlib import Path
from typing import Iterable

from textual import on, work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from lab.profile.engines import missing_engines
from lab.profile.load import ProfileError, load_profile
from lab.registry import Registry, load_registry
from lab.render.report import load_for_report, render
from lab.store import load_run, load_steps
from lab.tui.messages import EnginesMissing, RunFailed
from lab.tui.screens.error import ErrorScreen
from lab.tui.screens.export import ExportScreen, export_text
from lab.tui.screens.help import HelpScreen
from lab.tui.screens.picker import Choice, PickerScreen
from lab.tui.screens.plugins import PluginsScreen
from lab.tui.screens.run import TABS, RunScreen
from lab.tui.session import RunSession

GIL_SWITCH_S = 0.0005


class LabApp(App[int]):
    CSS_PATH = "lab.tcss"
    TITLE = "speclab"
    SUB_TITLE = "speculative decoding lab"
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("o", "open", "Open"),
        Binding("f2", "plugins", "Plugins"),
        Binding("f1,question_mark", "help", "Help"),
    ]

    def __init__(
        self,
        profile_path: str | None = None,
        *,
        registry: Registry | None = None,
        runs_dir: str | Path = "runs",
        profiles_dir: str | Path | None = None,
        saved_run: str | Path | None = None,
        refresh_hz: float | None = None,
        compare: tuple[str, str] | None = None,
    ) -> None:
        """``compare``: two saved run directories to open side by side."""
        super().__init__()
        self.compare_runs = compare
        self.refresh_hz = refresh_hz
        self.profile_path = profile_path
        self._lab_registry = registry
        self.runs_dir = Path(runs_dir)
        if profiles_dir is None:
            profiles_dir = Path(profile_path).parent if profile_path else Path("profiles")
        self.profiles_dir = Path(profiles_dir)
        self.saved_run = saved_run
        self.sessions: list[RunSession] = []
        self._errors: list[tuple[str, str]] = []
        self._switch_interval = sys.getswitchinterval()
        self.terminated = False  # SIGTERM ended the app (exit status 143)

    @property
    def registry(self) -> Registry:
        if self._lab_registry is None:
            self._lab_registry = load_registry()
        return self._lab_registry

    def on_mount(self) -> None:
        # what is built so far lives as long as the app: keep full
        # collections from walking it (event-loop stalls)
        self.call_after_refresh(gc.freeze)
        # the engine thread wins the GIL back sooner after each decode call
        sys.setswitchinterval(min(self._switch_interval, GIL_SWITCH_S))
        # SIGTERM quits as q does: the run stopped, its engines closed.
        try:
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, self._sigterm)
        except (NotImplementedError, RuntimeError, ValueError):  # no signals here (not the main thread)
            pass
        if self.compare_runs is not None:
            from lab.tui.screens.compare import CompareScreen

            self.push_screen(PickerScreen(self.profiles_dir, self.runs_dir), self._picked)
            screen = CompareScreen.open(*self.compare_runs)
            if isinstance(screen, str):
                self.show_error("cannot compare", screen)
            else:
                self.push_screen(screen)
            return
        if self.saved_run is not None:
            self.push_screen(PickerScreen(self.profiles_dir, self.runs_dir), self._picked)
            self.open_saved(str(self.saved_run))
            return
        error = None
        if self.profile_path is not None:
            error = self.open_profile(self.profile_path, replace=False)
            if error is None:
                return
        self.push_screen(PickerScreen(self.profiles_dir, self.runs_dir), self._picked)
        if error:
            self.show_error("profile error", error)

    def _sigterm(self) -> None:
        self.terminated = True
        self.call_later(self.action_quit)

    def on_unmount(self) -> None:
        try:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGTERM)
        except (NotImplementedError, RuntimeError, ValueError):
            pass
        sys.setswitchinterval(self._switch_interval)
        gc.unfreeze()

    # -- opening ----------------------------------------------------------------
    def open_profile(self, path: str, replace: bool = True) -> str | None:
        """Show a profile's run screen; returns the profile error, if any."""
        try:
            profile = load_profile(path, self.registry)
        except ProfileError as exc:
            return str(exc)
        screen = RunScreen.live(profile)
        if replace:
            self.switch_screen(screen)
        else:
            self.push_screen(screen)
        self._check_engines(screen)
        return None

    @work(thread=True, exit_on_error=False, group="engines")
    def _check_engines(self, screen: RunScreen) -> None:
        """Whether every arm's engine can load, asked as the profile opens
        (an import tried in a child interpreter takes seconds: off the UI
        thread); the screen shows what is missing before s is pressed."""
        if screen.profile is not None:
            problems = missing_engines(screen.profile, self.registry)
            if problems:
                screen.post_message(EnginesMissing(tuple(problems)))

    def open_saved(self, run_dir: str) -> bool:
        try:
            data = load_run(run_dir)
            steps = load_steps(run_dir)
            screen = RunScreen.from_saved(data, run_dir, steps)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self.show_error("cannot open saved run", f"{run_dir}: {exc}")
            return False
        self.push_screen(screen)
        return True

    def _picked(self, choice: Choice | None) -> None:
        if choice is None:
            if not any(isinstance(s, RunScreen) for s in self.screen_stack):
                self.exit(0)
            return
        kind, path = choice
        if kind == "run":
            self.open_saved(path)
            return
        if self.active_session() is not None:
            self.show_error("a run is going", "Stop it (x) or let it finish before opening another profile.")
            return
        replace = isinstance(self.screen, RunScreen) and not self.screen.read_only
        error = self.open_profile(path, replace=replace)
        if error:
            self.show_error("profile error", error)

    def action_open(self) -> None:
        if isinstance(self.screen, PickerScreen):
            return
        self.push_screen(PickerScreen(self.profiles_dir, self.runs_dir), self._picked)

    def action_plugins(self) -> None:
        if not isinstance(self.screen, PluginsScreen):
            self.push_screen(PluginsScreen(self.registry))

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    # -- errors ------------------------------------------------------------------
    def show_error(self, title: str, detail: str) -> None:
        """One modal at a time; later failures wait their turn."""
        self._errors.append((title, detail))
        if not isinstance(self.screen, ErrorScreen):
            self._next_error()

    def _next_error(self, _: object = None) -> None:
        if self._errors:
            title, detail = self._errors.pop(0)
            self.push_screen(ErrorScreen(title, detail), self._next_error)

    @on(Worker.StateChanged)
    def _worker_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR and event.worker.group == "run":
            err = event.worker.error
            text = "".join(traceback.format_exception(err)) if isinstance(err, BaseException) else str(err)
            self.show_error("the run stopped with an error", text)
            screen = next((s for s in self.screen_stack if isinstance(s, RunScreen) and s.session
                           and not s.session.running), None)
            if screen is not None:
                screen.post_message(RunFailed())

    @on(RunScreen.FailureSeen)
    def _failure_seen(self, message: RunScreen.FailureSeen) -> None:
        self.show_error(message.title, message.detail)

    # -- running -----------------------------------------------------------------
    def active_session(self) -> RunSession | None:
        return next((s for s in self.sessions if s.running), None)

    @on(RunScreen.StartRequested)
    def _start_requested(self, message: RunScreen.StartRequested) -> None:
        self.start_run(message.screen)

    def start_run(self, screen: RunScreen) -> bool:
        if screen.profile is None:
            return False
        if self.active_session() is not None:
            self.notify("another run is going; one engine at a time", severity="warning")
            return False
        session = RunSession(screen.profile, self.registry, self.runs_dir, screen.post_message, refresh_hz=self.refresh_hz)
        self.sessions = [s for s in self.sessions if s.running] + [session]
        session.start()
        screen.attach(session)
        self._run_worker(session)
        return True

    @work(thread=True, exclusive=True, exit_on_error=False, group="run")
    def _run_worker(self, session: RunSession) -> None:
        session.run_blocking()

    async def stop_runs(self, timeout: float = 30.0) -> None:
        loop = asyncio.get_running_loop()
        for session in self.sessions:
            if session.running:
                await loop.run_in_executor(None, session.stop, timeout)

    def stop_runs_blocking(self, timeout: float = 30.0) -> None:
        for session in self.sessions:
            session.stop(timeout)

    async def action_quit(self) -> None:
        if self.active_session() is not None:
            probing = False
            for screen in self.screen_stack:
                if isinstance(screen, RunScreen):
                    screen.mark_stopping()
                    probing = probing or screen.probing is not None
            # The probe measures in a process of its own, which the stop
            # ends at once (lab.probing.isolated).
            self.notify("stopping the probe and the run..." if probing
                        else "stopping the run and closing its engine...")
        await self.stop_runs()
        self.exit(0)

    # -- saving ------------------------------------------------------------------
    @on(RunScreen.SaveRequested)
    def _save_requested(self, message: RunScreen.SaveRequested) -> None:
        self.save_comparison(message.screen)

    @on(RunScreen.ExportRequested)
    def _export_requested(self, message: RunScreen.ExportRequested) -> None:
        self.export_comparison(message.screen)

    def save_comparison(self, screen: RunScreen) -> Path | None:
        """Write report.md and comparison.csv into the directory of the run
        this session ran (the one `lab run` writes; results.json and
        steps.jsonl are written as the run goes). A saved run opened here is
        saved already: nothing is written into it."""
        run_dir = screen.run_dir()
        if screen.read_only:
            self.notify(f"already saved: {run_dir}")
            return run_dir
        if run_dir is None:
            self.notify("nothing to save yet: start the run (s) first", severity="warning")
            return None
        # Steps and probe attached, as the report `lab run` saves.
        data = load_for_report(run_dir)
        (run_dir / "report.md").write_text(render(data, "md"), encoding="utf-8")
        (run_dir / "comparison.csv").write_text(render(data, "csv"), encoding="utf-8")
        self.notify(f"saved: {run_dir}")
        return run_dir

    def export_comparison(self, screen: RunScreen) -> None:
        """The export dialog, then the chosen format written where it says:
        what `lab report RUN_DIR --format F` prints, rendered off the UI
        thread; the run's own files are never replaced (ExportScreen)."""
        run_dir = screen.run_dir()
        if run_dir is None:
            self.notify("nothing to export yet: start the run (s) first", severity="warning")
            return

        def done(choice: tuple[str, str] | None) -> None:
            if choice is not None:
                self._export(run_dir, choice[0], Path(choice[1]).expanduser())

        self.push_screen(ExportScreen(run_dir), done)

    @work(thread=True, exit_on_error=False, group="export")
    def _export(self, run_dir: Path, fmt: str, out: Path) -> None:
        try:
            text = export_text(run_dir, fmt)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text, encoding="utf-8")
        except Exception as exc:  # noqa: BLE001 - a saved run is user data: a message, not a traceback
            self.call_from_thread(self.show_error, "export failed", f"{type(exc).__name__}: {exc}")
            return
        self.call_from_thread(self.notify, f"exported {fmt}: {out}")

    # -- command palette -----------------------------------------------------------
    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Open (o)", "Open a profile or a saved run", self.action_open)
        yield SystemCommand("Plugins (f2)", "Backends, drafters and plugin load errors", self.action_plugins)
        yield SystemCommand("Help (f1)", "Keys and what the lanes show", self.action_help)
        if isinstance(screen, RunScreen):
            for key, tab, title in TABS:
                if screen.check_action("show_tab", (tab,)):
                    yield SystemCommand(f"Show {title.lower()} ({key})", f"Switch the bottom pane to {title}",
                                        lambda tab=tab: screen.action_show_tab(tab))
            yield SystemCommand("Next lane (→)", "Select the next arm's lane; the plots follow",
                                lambda: screen.action_select(1))
            yield SystemCommand("Previous lane (←)", "Select the previous arm's lane",
                                lambda: screen.action_select(-1))
            for title, help_text, action in (
                ("Start run (s)", "Run every arm of the profile", "start"),
                ("Pause (p)", "Hold at the next step (or cell), outside any measurement", "pause"),
                ("Resume (p)", "Go on from the hold", "resume"),
                ("Cancel selected arm (c)", "Stop the selected arm; its cells are cancelled", "cancel_arm"),
                ("Skip to next arm (n)", "Stop the running arm and go on; its cells are skipped", "next_arm"),
                ("Stop run (x)", "Cancel every remaining cell", "stop"),
                ("Save comparison (w)", "Write report.md and comparison.csv into the run directory", "save"),
                ("Export comparison (e)", "Markdown, CSV or JSON to a path", "export"),
                ("Next round (r)", "Show the highlighted row's next round in its lane, against the baseline",
                 "next_round"),
                ("Compare with another run (m)", "Two saved runs side by side (lab report --compare)", "compare"),
                ("Back (escape)", "Close this saved run", "close"),
            ):
                if screen.check_action(action, ()):
                    yield SystemCommand(title, help_text, getattr(screen, f"action_{action}"))


def run_app(profile_path: str | None, refresh_hz: float | None = None, compare: tuple[str, str] | None = None,
            saved_run: str | None = None) -> int:
    """Entry point of `lab` / `lab PROFILE.toml` / `lab RUN_DIR` / `lab --compare RUN_A RUN_B`."""
    app = LabApp(profile_path, refresh_hz=refresh_hz, compare=compare, saved_run=saved_run)
    try:
        code = app.run()
    finally:
        # Whatever ended the app, no engine outlives it.
        app.stop_runs_blocking()
    return 143 if app.terminated else int(code or 0)
