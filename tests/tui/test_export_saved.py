"""A saved run opened in the TUI is evidence: opening it, saving (w) and
exporting (e) leave every one of its files byte-identical; an export goes to
a new name (never over report.md), asks before replacing a file elsewhere,
and holds exactly what `lab report RUN_DIR --format F` prints."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from lab.cli import main
from lab.tui.app import LabApp
from lab.tui.screens.export import ExportScreen
from lab.tui.screens.run import RunScreen
from tests.fakes import fake_registry
from tests.tui.helpers import wait_until

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]
# a real run as `lab run` saved it: steps, probe, figures and report.md beside results
COMMITTED = ROOT / "results" / "first-command-cpu"
SIZE = (120, 40)


def _hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _report(run_dir: Path, fmt: str, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(["report", str(run_dir), "--format", fmt]) == 0
    return capsys.readouterr().out


def _copy(tmp_path: Path) -> Path:
    run_dir = tmp_path / "runs" / COMMITTED.name
    shutil.copytree(COMMITTED, run_dir)
    return run_dir


async def _open(pilot, app: LabApp) -> RunScreen:  # type: ignore[no-untyped-def]
    await wait_until(pilot, lambda: isinstance(app.screen, RunScreen), what="the saved run")
    screen = app.screen
    assert isinstance(screen, RunScreen) and screen.read_only
    return screen


async def _dialog(pilot, app: LabApp) -> ExportScreen:  # type: ignore[no-untyped-def]
    await pilot.press("e")
    await wait_until(pilot, lambda: isinstance(app.screen, ExportScreen), what="the export dialog")
    dialog = app.screen
    assert isinstance(dialog, ExportScreen)
    return dialog


async def test_export_from_a_saved_run_leaves_every_file_of_the_run_byte_identical(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = _copy(tmp_path)
    before = _hashes(run_dir)
    app = LabApp(None, registry=fake_registry(), runs_dir=run_dir.parent, profiles_dir=tmp_path, saved_run=run_dir)
    async with app.run_test(size=SIZE) as pilot:
        screen = await _open(pilot, app)
        await pilot.press("w")  # saved already: writes nothing
        dialog = await _dialog(pilot, app)
        # the default is a new name beside the run's files, never report.md
        default = Path(dialog.query_one("#export-path").value)
        assert default == run_dir / "export.md"
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.screen is screen, what="the dialog to close")
        await wait_until(pilot, default.exists, what="the Markdown export")
        await app.workers.wait_for_complete()
    after = _hashes(run_dir)
    new = sorted(set(after) - set(before))
    assert new == ["export.md"], new
    changed = [name for name, digest in before.items() if after.get(name) != digest]
    assert not changed, f"the export changed the run's own files: {changed}"
    # the same text `lab report` prints, figures, probe and draft policy included
    text = default.read_text(encoding="utf-8")
    assert text == _report(run_dir, "md", capsys)
    assert "## Figures" in text and "needs the run's steps.jsonl" not in text and "No verify-cost probe" not in text


@pytest.mark.parametrize("fmt", ["csv", "json"])
async def test_each_format_exports_what_lab_report_prints(tmp_path: Path, fmt: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = _copy(tmp_path)
    before = _hashes(run_dir)
    target = tmp_path / "out" / f"cmp.{fmt}"
    app = LabApp(None, registry=fake_registry(), runs_dir=run_dir.parent, profiles_dir=tmp_path, saved_run=run_dir)
    async with app.run_test(size=SIZE) as pilot:
        screen = await _open(pilot, app)
        dialog = await _dialog(pilot, app)
        await pilot.click(f"#fmt-{fmt}")
        await pilot.pause()
        assert Path(dialog.query_one("#export-path").value).name == f"export.{fmt}"
        dialog.query_one("#export-path").value = str(target)
        await pilot.click("#export-ok")
        await wait_until(pilot, lambda: app.screen is screen, what="the dialog to close")
        await wait_until(pilot, target.exists, what="the export")
        await app.workers.wait_for_complete()
    assert target.read_text(encoding="utf-8") == _report(run_dir, fmt, capsys)
    assert _hashes(run_dir) == before


async def test_the_runs_own_files_are_refused_and_a_file_elsewhere_is_replaced_only_when_asked_twice(
        tmp_path: Path) -> None:
    run_dir = _copy(tmp_path)
    before = _hashes(run_dir)
    elsewhere = tmp_path / "mine.md"
    elsewhere.write_text("keep me\n", encoding="utf-8")
    app = LabApp(None, registry=fake_registry(), runs_dir=run_dir.parent, profiles_dir=tmp_path, saved_run=run_dir)
    async with app.run_test(size=SIZE) as pilot:
        screen = await _open(pilot, app)
        for own in ("report.md", "results.json.gz", "figures/speedup.svg"):
            dialog = await _dialog(pilot, app)
            dialog.query_one("#export-path").value = str(run_dir / own)
            await pilot.press("enter")
            await pilot.pause()
            assert app.screen is dialog, f"{own} was taken"
            problem = str(dialog.query_one("#export-problem").render())
            assert "one of the run's own files" in problem, problem
            await pilot.press("enter")  # asking twice does not make it an export either
            await pilot.pause()
            assert app.screen is dialog
            await pilot.press("escape")
            await wait_until(pilot, lambda: app.screen is screen)

        dialog = await _dialog(pilot, app)
        dialog.query_one("#export-path").value = str(elsewhere)
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is dialog
        assert "exists: enter again to replace it" in str(dialog.query_one("#export-problem").render())
        assert elsewhere.read_text(encoding="utf-8") == "keep me\n"
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.screen is screen, what="the dialog to close")
        await wait_until(pilot, lambda: elsewhere.read_text(encoding="utf-8").startswith("#"), what="the replacement")
        await app.workers.wait_for_complete()
    assert _hashes(run_dir) == before
