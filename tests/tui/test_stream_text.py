"""StreamText, a lane's text: wrapping, following the end with a jump
scroll, leaving a reader who scrolled up alone, draft marking."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.app import App, ComposeResult

import lab.tui
from lab.tui.widgets.stream_text import StreamText

pytestmark = pytest.mark.anyio
WIDTH, HEIGHT = 20, 6


class Holder(App[None]):
    CSS_PATH = str(Path(lab.tui.__file__).parent / "lab.tcss")  # the draft style lives there
    CSS = f"StreamText {{ width: {WIDTH}; height: {HEIGHT}; scrollbar-size-vertical: 0; }}"

    def compose(self) -> ComposeResult:
        yield StreamText()


def visible(view: StreamText) -> list[str]:
    top = round(view.scroll_y)
    return ["".join(t for t, _ in line) for line in view._lines[top:top + HEIGHT]]


async def test_words_wrap_whole_and_the_text_is_kept() -> None:
    async with Holder().run_test() as pilot:
        view = pilot.app.query_one(StreamText)
        words = [f"w{i:02d}" for i in range(30)]
        view.append([(w + " ", i % 2 == 0) for i, w in enumerate(words)])
        await pilot.pause()
        assert view.text == "".join(w + " " for w in words)
        for line in view._lines:
            joined = "".join(t for t, _ in line)
            assert len(joined) <= WIDTH
            assert all(len(part) == 3 for part in joined.split())  # no word cut in two
        assert view.drafted_chars == 15 * 4 and view.target_chars == 15 * 4


async def test_following_the_end_jumps_half_a_view_at_a_time() -> None:
    async with Holder().run_test() as pilot:
        view = pilot.app.query_one(StreamText)
        scrolls = set()
        for i in range(60):
            view.append([(f"line {i}\n", False)])
            await pilot.pause()
            last = len(view._lines) - 1
            top = round(view.scroll_y)
            assert top <= last < top + HEIGHT, f"line {i} is out of view"
            scrolls.add(top)
        # one scroll per half view of new lines, not one per line
        assert 1 < len(scrolls) <= 60 // (HEIGHT // 2) + 1
        assert visible(view)[0].startswith("line")


async def test_a_reader_who_scrolled_up_stays_where_they_are() -> None:
    async with Holder().run_test() as pilot:
        view = pilot.app.query_one(StreamText)
        view.append([(f"line {i}\n", False) for i in range(20)])
        await pilot.pause()
        view.scroll_to(y=0, animate=False, immediate=True)
        await pilot.pause()
        view.append([(f"more {i}\n", True) for i in range(20)])
        await pilot.pause()
        assert round(view.scroll_y) == 0 and visible(view)[0] == "line 0"
        # scrolling back to the end follows again
        view.scroll_end(animate=False, immediate=True)
        view.append([("tail\n", False)])
        await pilot.pause()
        assert "tail" in visible(view)


async def test_drafted_text_is_styled_apart() -> None:
    async with Holder().run_test() as pilot:
        view = pilot.app.query_one(StreamText)
        view.append([("target ", False), ("drafted", True)])
        await pilot.pause()
        segments = list(view.render_line(0))
        styles = {seg.text.strip(): seg.style for seg in segments if seg.text.strip()}
        assert styles["target"] != styles["drafted"]
