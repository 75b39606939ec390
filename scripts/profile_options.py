"""Rewrite the backend and drafter option tables of docs/profiles.md from
the installed plugins (what `lab plugins` lists), between its two markers.

    .venv/bin/python scripts/profile_options.py
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "profiles.md"
BEGIN = "<!-- options: written by scripts/profile_options.py -->"
END = "<!-- end of options -->"
# the server routes by name repeat llamacpp-server's options: listed once
SERVER = "llamacpp-server"
ROUTES = ("llamacpp-dflash", "llamacpp-mtp")


def _default(value: object) -> str:
    if value is None:
        return "—"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value!r}`"


def _type(opt: Any) -> str:
    kind = opt.type.__name__
    choices, lo, hi = opt.choices, opt.min, opt.max
    if choices:
        return f"{kind} ({', '.join(map(str, choices))})"
    if (lo is not None or hi is not None) and abs(lo or 0) < 2**31 and (hi is None or hi < 2**31):
        return f"{kind} [{'' if lo is None else f'{lo:g}'}..{'' if hi is None else f'{hi:g}'}]"
    return kind


def tables() -> str:
    sys.path[:0] = [str(ROOT), str(ROOT / "plugins")]
    from lab.registry import load_registry

    registry = load_registry()
    shared = {o.name for o in registry.backends[SERVER].options} - {"spec_type", "draft_model"} \
        if SERVER in registry.backends else set()
    out: list[str] = []
    for group in (registry.backends, registry.drafters):
        for name in sorted(group):
            cls = group[name]
            opts = list(cls.options)
            out += ["", f"#### `{name}`", "", cls.description, ""]
            if name in ROUTES and shared:
                opts = [o for o in opts if o.name not in shared]
                out += [f"Its own options below, and every `{SERVER}` option but `spec_type` and `draft_model`.", ""]
            if not opts:
                out.append("No options.")
                continue
            out += ["| option | type | default | what |", "|---|---|---|---|"]
            out += [f"| `{o.name}` | {_type(o)} | {_default(o.default)} | {o.help.replace('|', '/')} |" for o in opts]
    return "\n".join(out) + "\n"


def main() -> int:
    text = PAGE.read_text(encoding="utf-8")
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    PAGE.write_text(text[:start] + "\n" + tables() + "\n" + text[end:], encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
