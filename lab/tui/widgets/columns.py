"""Which columns of a table fit its width: the least telling give way, in a
stated order, so that nothing is cut at the right edge."""

from __future__ import annotations

from typing import Sequence

from rich.text import Text

# a DataTable cell's padding (one column either side), and its vertical scrollbar
PADDING = 2
SCROLLBAR = 2


def _cell_len(cell: str | Text) -> int:
    return Text(cell).cell_len if isinstance(cell, str) else cell.cell_len


def fitting(columns: Sequence[tuple[str, str]], cells: Sequence[Sequence[str | Text]], width: int,
            give_way: Sequence[Sequence[str]]) -> list[str]:
    """The keys of ``columns`` (key, label) that fit ``width`` with these
    rows' ``cells`` (one per column, in order): each group of ``give_way``
    dropped in turn until the table fits, or none is left to drop."""
    need = {}
    for i, (key, label) in enumerate(columns):
        need[key] = max([Text(label).cell_len, *(_cell_len(row[i]) for row in cells if i < len(row))]) + PADDING
    shown = [key for key, _ in columns]
    for group in give_way:
        if sum(need[k] for k in shown) + SCROLLBAR <= width:
            break
        shown = [k for k in shown if k not in group]
    return shown
