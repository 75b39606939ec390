"""StreamText: a lane's generated text, appended to as tokens land.

A line-API view whose cost per batch does not grow with the output; accepted
drafts are styled apart and rejected drafts leave a mark ("✗3") outside the
text."""

from __future__ import annotations

from typing import Sequence

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget

Piece = tuple[str, int]  # text and its kind: TARGET, DRAFT (accepted) or REJECTED (a mark)
TARGET, DRAFT, REJECTED = 0, 1, 2
Mark = tuple[int, int]  # (characters into the appended text, drafted tokens rejected there)


def rejected_mark(n: int) -> str:
    return f"✗{n}"


def with_marks(pieces: Sequence[tuple[str, int]], marks: Sequence[Mark]) -> list[Piece]:
    """``pieces`` with each mark's REJECTED piece put at its offset into
    their joined text (a piece split where a mark falls inside it)."""
    if not marks:
        return list(pieces)
    out: list[Piece] = []
    todo = sorted(marks)
    at = 0
    for text, kind in pieces:
        while todo and todo[0][0] <= at + len(text):
            cut = todo[0][0] - at
            if cut > 0:
                out.append((text[:cut], kind))
            text, at = text[cut:], at + cut
            out.append((rejected_mark(todo.pop(0)[1]), REJECTED))
        if text:
            out.append((text, kind))
            at += len(text)
    out.extend((rejected_mark(n), REJECTED) for _, n in todo)
    return out


class StreamText(ScrollView, can_focus=False):
    # styled in lab.tcss: .stream-text--draft (accepted drafts), .stream-text--target,
    # .stream-text--rejected (the marks of rejected drafts)
    COMPONENT_CLASSES = {"stream-text--draft", "stream-text--target", "stream-text--rejected"}

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._pieces: list[Piece] = []
        self._lines: list[list[Piece]] = [[]]
        self._widths: list[int] = [0]
        self._wrap = 0
        self._cache: dict[int, Strip] = {}
        self._styles: tuple[Style, Style, Style, Style] | None = None
        self.drafted_chars = 0
        self.target_chars = 0
        self.rejected = 0  # drafted tokens rejected, as marked

    @property
    def text(self) -> str:
        """The generated text, without the marks."""
        return "".join(t for t, kind in self._pieces if kind != REJECTED)

    @property
    def line_count(self) -> int:
        return len(self._lines) - (1 if not self._lines[-1] else 0)

    def clear(self) -> None:
        self._pieces = []
        self._lines = [[]]
        self._widths = [0]
        self._cache.clear()
        self.drafted_chars = self.target_chars = self.rejected = 0
        self.virtual_size = Size(self._wrap, 0)
        self.scroll_to(0, 0, animate=False)
        self.refresh()

    def append(self, pieces: Sequence[tuple[str, int]], marks: Sequence[Mark] = ()) -> None:
        """Add text pieces (text, TARGET or DRAFT; a bool says whether it
        came from accepted drafts) and the marks of rejected drafts."""
        self.rejected += sum(n for _, n in marks)
        pieces = with_marks(pieces, marks)
        if not pieces:
            return
        at_end = self.scroll_y >= self.max_scroll_y
        scroll_before = round(self.scroll_y)
        first_dirty = len(self._lines) - 1
        for text, draft in pieces:
            if not text:
                continue
            self._pieces.append((text, draft))
            if draft == DRAFT:
                self.drafted_chars += len(text)
            elif draft == TARGET:
                self.target_chars += len(text)
            if self._wrap:
                self._wrap_in(text, draft)
        for y in [k for k in self._cache if k >= first_dirty]:
            del self._cache[y]
        rows = max(len(self._lines), self.virtual_size.height)
        view = self.scrollable_content_region.height
        last = len(self._lines) - 1
        if at_end and view > 0 and last >= scroll_before + view:
            # jump scroll by half a page: every scroll repaints the whole view
            top = max(0, last - view // 2)
            self._set_virtual_size(Size(self._wrap, max(len(self._lines), top + view)))
            self.scroll_to(y=top, animate=False, immediate=True)
        else:
            self._set_virtual_size(Size(self._wrap, rows))
        if round(self.scroll_y) == scroll_before:
            # repaint only the changed lines (most batches touch the last one or two)
            self.refresh_lines(first_dirty, len(self._lines) - first_dirty)
        # else scrolling has already asked for the whole widget

    def _set_virtual_size(self, size: Size) -> None:
        """Set ``virtual_size`` without the screen-wide layout a plain
        assignment triggers: growing text never changes this widget's size."""
        if size == self.virtual_size:
            return
        scroll_update = getattr(self, "_scroll_update", None)
        if scroll_update is None:  # a Textual without it: pay for the layout
            self.virtual_size = size
            return
        self.set_reactive(Widget.virtual_size, size)
        scroll_update(size)

    # -- wrapping -----------------------------------------------------------
    def _newline(self) -> None:
        self._lines.append([])
        self._widths.append(0)

    def _put(self, text: str, draft: int) -> None:
        line = self._lines[-1]
        if line and line[-1][1] == draft:
            line[-1] = (line[-1][0] + text, draft)
        else:
            line.append((text, draft))
        self._widths[-1] += cell_len(text)

    def _carry_word(self) -> list[Piece]:
        """Take the unfinished word off the end of the last line so it can
        move to the next one whole."""
        line = self._lines[-1]
        joined = "".join(t for t, _ in line)
        cut = len(joined.rstrip(" ")) if joined.endswith(" ") else joined.rfind(" ") + 1
        if joined.endswith(" ") or cut <= 0 or len(joined) - cut > max(8, self._wrap // 3):
            return []
        carried: list[Piece] = []
        need = len(joined) - cut
        while need > 0 and line:
            text, draft = line.pop()
            if len(text) <= need:
                carried.insert(0, (text, draft))
                need -= len(text)
            else:
                line.append((text[:-need], draft))
                carried.insert(0, (text[-need:], draft))
                need = 0
        self._widths[-1] = sum(cell_len(t) for t, _ in line)
        return carried

    def _wrap_in(self, text: str, draft: int) -> None:
        width = self._wrap
        for n, part in enumerate(text.split("\n")):
            if n:
                self._newline()
            while part:
                room = width - self._widths[-1]
                if part.isascii():
                    take = min(room, len(part))
                else:
                    take, used = 0, 0
                    for ch in part:
                        w = cell_len(ch)
                        if used + w > room:
                            break
                        used += w
                        take += 1
                if take < len(part) or room <= 0:
                    # The line is full: break before an unfinished word.
                    piece, part = part[:take], part[take:]
                    if piece:
                        self._put(piece, draft)
                    carried = self._carry_word() if part and not part[0].isspace() else []
                    self._newline()
                    for t, d in carried:
                        self._put(t, d)
                    part = part.lstrip(" ") if not carried else part
                    if take == 0 and not carried and self._widths[-1] == 0 and part:
                        # A character wider than the whole line: place it anyway.
                        self._put(part[0], draft)
                        part = part[1:]
                    continue
                self._put(part, draft)
                part = ""

    def _rewrap(self) -> None:
        self._lines = [[]]
        self._widths = [0]
        self._cache.clear()
        if self._wrap:
            for text, draft in self._pieces:
                self._wrap_in(text, draft)
        self.virtual_size = Size(self._wrap, len(self._lines))

    def on_resize(self) -> None:
        width = max(1, self.scrollable_content_region.width)
        if width != self._wrap:
            at_end = self.scroll_y >= self.max_scroll_y
            self._wrap = width
            self._rewrap()
            if at_end:
                self.scroll_end(animate=False, immediate=True, x_axis=False)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cache.clear()
        self._styles = None

    def _line_styles(self) -> tuple[Style, Style, Style, Style]:
        """Base, then the target's, draft's and rejected mark's styles (by
        kind). Resolving a widget's style walks its ancestors; doing that
        per line was a large part of a frame."""
        if self._styles is None:
            base = self.rich_style
            self._styles = (
                base,
                base + self.get_component_rich_style("stream-text--target", partial=True),
                base + self.get_component_rich_style("stream-text--draft", partial=True),
                base + self.get_component_rich_style("stream-text--rejected", partial=True),
            )
        return self._styles

    # -- rendering ----------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.scrollable_content_region.width
        styles = self._line_styles()
        base = styles[0]
        if index >= len(self._lines):
            return Strip.blank(width, base)
        strip = self._cache.get(index)
        if strip is None:
            segments = [Segment(t, styles[1 + int(kind)]) for t, kind in self._lines[index]]
            strip = Strip(segments)
            self._cache[index] = strip
        return strip.crop_extend(scroll_x, scroll_x + width, base)
