"""LabFooter: the key bar, fitted to the terminal's width.

Whole keys give way in GIVE_WAY order, never Quit or Help; keys of one group
show as one item ("1 2 3 Views")."""

from __future__ import annotations

from typing import NamedTuple

from rich.cells import cell_len
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Footer
from textual.widgets._footer import FooterKey  # the footer's own key widget; Textual does not export it

KEEP = ("quit", "help")
# first to go; keys not named here go after these, from the right
GIVE_WAY = ("show_tab", "open", "plugins", "compare", "next_round", "export", "save", "next_arm", "cancel_arm",
            "select")


class FooterItem(NamedTuple):
    key: str
    display: str
    description: str
    action: str
    enabled: bool
    tooltip: str


def action_name(action: str) -> str:
    """``app.show_tab('x')`` -> ``show_tab``."""
    return action.split("(", 1)[0].rsplit(".", 1)[-1]


def item_width(item: FooterItem) -> int:
    """Cells a FooterKey takes in the footer's default (not compact) style:
    the key padded by one on each side, the description and one after it."""
    return cell_len(item.display) + 2 + (cell_len(item.description) + 1 if item.description else 0)


def fit(items: list[FooterItem], width: int) -> list[FooterItem]:
    """The items that fit ``width``, in their order: KEEP ones always, the
    others dropped by GIVE_WAY rank, then from the right."""
    kept = list(items)

    def rank(i: int) -> tuple[int, int]:
        name = action_name(kept[i].action)
        return (GIVE_WAY.index(name) if name in GIVE_WAY else len(GIVE_WAY), -i)

    while sum(item_width(i) for i in kept) > width:
        droppable = [i for i, item in enumerate(kept) if action_name(item.action) not in KEEP]
        if not droppable:
            break
        kept.pop(min(droppable, key=rank))
    return kept


class LabFooter(Footer):
    def __init__(self) -> None:
        super().__init__()
        self._keys: list[tuple[FooterKey, FooterItem]] = []
        self._palette: FooterItem | None = None
        self._palette_key: FooterKey | None = None

    def items(self) -> list[FooterItem]:
        """The shown bindings of the screen, one item per action (a group's
        keys as one item), in the screen's binding order."""
        out: list[FooterItem] = []
        seen: set[str] = set()
        groups: dict[object, int] = {}
        for _, binding, enabled, tooltip in self.screen.active_bindings.values():
            if not binding.show or binding.action in seen:
                continue
            seen.add(binding.action)
            display = self.app.get_key_display(binding)
            group = binding.group
            if group is not None:
                at = groups.get(id(group))
                if at is not None:
                    first = out[at]
                    out[at] = first._replace(display=f"{first.display} {display}")
                    continue
                groups[id(group)] = len(out)
                out.append(FooterItem(binding.key, display, group.description, binding.action, enabled, ""))
                continue
            out.append(FooterItem(binding.key, display, binding.description, binding.action, enabled,
                                  tooltip or binding.tooltip))
        # the screen's own order whatever has the focus (a focused table's
        # arrow keys would otherwise bring the lane key to the front)
        order = [b.action for b in self.screen.BINDINGS if isinstance(b, Binding)]
        return sorted(out, key=lambda item: order.index(item.action) if item.action in order else len(order))

    def _shown(self) -> list[FooterItem]:
        width = self.size.width or self.app.size.width
        if self._palette is not None and self.show_command_palette:
            width -= item_width(self._palette) + 2  # its border and padding
        return fit([item for _, item in self._keys], width)

    def _fit(self) -> None:
        shown = self._shown()
        for key, item in self._keys:
            key.display = item in shown
        if self._palette_key is not None:
            self._palette_key.display = self.show_command_palette

    def compose(self) -> ComposeResult:
        # a resize only shows or hides keys: no recompose races a bindings change
        self._keys = []
        self._palette = self._palette_key = None
        if not self._bindings_ready:
            return
        if self.app.ENABLE_COMMAND_PALETTE:
            found = self.screen.active_bindings.get(self.app.COMMAND_PALETTE_BINDING)
            if found is not None:
                _, binding, enabled, _ = found
                self._palette = FooterItem(binding.key, self.app.get_key_display(binding), binding.description,
                                           binding.action, enabled, binding.tooltip or binding.description)
        for item in self.items():
            key = FooterKey(item.key, item.display, item.description, item.action, disabled=not item.enabled,
                            tooltip=item.tooltip)
            self._keys.append((key, item))
        shown = self._shown()
        for key, item in self._keys:
            key.display = item in shown
            yield key.data_bind(compact=Footer.compact)
        palette = self._palette
        if palette is not None:
            self._palette_key = FooterKey(palette.key, palette.display, palette.description, palette.action,
                                          classes="-command-palette", disabled=not palette.enabled,
                                          tooltip=palette.tooltip)
            self._palette_key.display = self.show_command_palette
            yield self._palette_key

    def on_resize(self) -> None:
        self._fit()

    def watch_show_command_palette(self) -> None:
        self._fit()
