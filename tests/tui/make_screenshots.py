"""Screenshots of the run screen, made with Textual's own screenshot
facility (App.save_screenshot): a finished run of the fake backend (four
arms, one a sweep of two, three prompts) at 100x30 and 160x48.

    PYTHONPATH=$PWD:$PWD/plugins python tests/tui/make_screenshots.py results/tui
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from lab.tui.app import LabApp  # noqa: E402
from tests.fakes import fake_registry, profile_toml  # noqa: E402
from tests.tui.helpers import run_finished  # noqa: E402
from tests.tui.test_layout import FOUR_ARMS, PROMPTS  # noqa: E402

SIZES = ((100, 30), (160, 48))


async def shoot(out: Path, size: tuple[int, int]) -> Path:
    # a relative runs folder, so the header shows runs/<time>-demo
    Path("profile.toml").write_text(profile_toml(FOUR_ARMS, name="demo", prompts=PROMPTS), encoding="utf-8")
    app = LabApp("profile.toml", registry=fake_registry(), runs_dir="runs")
    async with app.run_test(size=size) as pilot:
        await pilot.press("s")
        await run_finished(pilot)
        while type(app.screen).__name__ == "ErrorScreen":
            await pilot.press("escape")
        await pilot.pause(0.5)
        name = f"run-screen-{size[0]}x{size[1]}.svg"
        app.save_screenshot(name, path=str(out))
        await pilot.press("q")
    return out / name


def main(out: str) -> None:
    target = Path(out).resolve()
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        for size in SIZES:
            print(asyncio.run(shoot(target, size)).relative_to(ROOT))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "results/tui")
