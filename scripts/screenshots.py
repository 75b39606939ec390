"""Regenerate the TUI screenshots of docs/tui.md with Textual's own SVG
export (App.save_screenshot), on the scripted test backend (tests/fakes.py)
with the demo profile's arm names, so no engine or model is needed:

- tui-80x24.svg: a run paused while its ngram arm streams (the lane follows
  the running arm; accepted drafts in bold green, rejected ones marked ✗n);
- tui-100x30.svg: the same run finished, the comparison filled in.

    .venv/bin/python scripts/screenshots.py [OUT_DIR]   (default: docs/img)

The figures are the fake backend's, not measurements.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lab.tui.app import LabApp  # noqa: E402
from lab.tui.screens.run import RunScreen  # noqa: E402
from tests.fakes import fake_registry, profile_toml  # noqa: E402
from tests.tui.helpers import run_finished, wait_until  # noqa: E402

# words the fake streams: long enough that no output repeats itself
TEXT = (
    "Lighthouses still matter because satellites can fail, receivers can lose power and a sailor in a storm "
    "trusts what he can see. A beam sweeping the dark tells him where the rocks are without any battery of "
    "his own, and its rhythm names the tower: two flashes every ten seconds is one harbour, a long white "
    "light another. Keepers are mostly gone, replaced by automatic lamps and solar panels, yet the towers "
    "are kept because the cost of a wreck is far higher than the cost of a light. They also anchor the "
    "coast in memory: villages grew around them, charts are drawn from them, and children still climb their "
    "stairs to look out over the water and understand, for a moment, how small a ship is at night. Modern "
    "navigation adds layers of safety, radar and electronic charts among them, but each layer can fail in "
    "its own way, and the old light is the one that fails least."
)


def arm(name: str, options: str, n_max: int | None = None) -> str:
    """One [[arms]] table of the fake backend, streaming TEXT."""
    head = f'[[arms]]\nname = "{name}"\nbackend = "fake"\n' + (f"n_max = {n_max}\n" if n_max else "")
    return head + f'options = {{ virtual_clock = true, {options}, text = "{TEXT}" }}\n\n'


ARMS = (
    arm("baseline", "token_delay_s = 0.002")
    + arm("ngram", "speculative = true, accepted = [4, 1, 0, 2, 3, 0], token_delay_s = 0.01", 4)
    + arm("draft-q4_0", "speculative = true, accepted = [3, 4, 2], virtual_draft_s = 0.004, token_delay_s = 0.002", 4)
    + arm("oracle", "speculative = true, accepted = [4], token_delay_s = 0.002", 4)
)
SHOTS = {"live": ((80, 24), "tui-80x24.svg"), "done": ((100, 30), "tui-100x30.svg")}


async def shoot(out: Path, state: str) -> Path:
    size, name = SHOTS[state]
    # a relative runs folder, so the header shows runs/<time>-demo
    Path("demo.toml").write_text(profile_toml(ARMS, name="demo", prompts=("prose", "code"), max_tokens=160),
                                 encoding="utf-8")
    app = LabApp("demo.toml", registry=fake_registry(), runs_dir="runs")
    async with app.run_test(size=size) as pilot:
        screen = app.screen
        assert isinstance(screen, RunScreen)
        await pilot.press("s")
        if state == "live":
            await wait_until(pilot, lambda: screen.lane("ngram").text.text.count(" ") > 90, timeout=120,
                             what="the ngram arm to stream")
            await pilot.press("p")
            await wait_until(pilot, lambda: screen.holding, what="the run to hold")
        else:
            await run_finished(pilot, timeout=120)
            while type(app.screen).__name__ == "ErrorScreen":
                await pilot.press("escape")
            screen._select(1)  # the ngram lane, whose text shows its marks
        await pilot.pause(0.5)
        app.save_screenshot(name, path=str(out))
        if state == "live":
            await pilot.press("x")
            await run_finished(pilot, timeout=60)
        await pilot.press("q")
    return out / name


def main(out: str = "docs/img") -> list[Path]:
    target = (ROOT / out).resolve() if not Path(out).is_absolute() else Path(out)
    target.mkdir(parents=True, exist_ok=True)
    here = Path.cwd()
    written = []
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            for state in SHOTS:
                written.append(asyncio.run(shoot(target, state)))
        finally:
            os.chdir(here)
    return written


if __name__ == "__main__":
    for path in main(*sys.argv[1:2]):
        print(path)
