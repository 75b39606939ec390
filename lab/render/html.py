"""``lab report --format html``: one self-contained page of a run (or of a
comparison) that opens offline: the Markdown report's sections as HTML,
each followed by its figures inline (SVG as data URIs, drawn in a process
of their own: :mod:`lab.render.draw`), and a
Content-Security-Policy that lets the page load nothing but itself. Text
from the run is escaped (raw HTML in a saved name or error is shown, never
run)."""

from __future__ import annotations

import base64
import html
from typing import Any, Mapping, Sequence

from lab.render import draw
from lab.render import figures as figs
from lab.render.sections import FOLDED, LEAD_FIGURES, section_id

ANSWER = "answer"

# Nothing is fetched: no scripts, no fonts, no remote images; images only as data URIs.
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"

_STYLE = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1b1b1b;background:#fff}
main{max-width:1100px;margin:0 auto;padding:1rem 1.25rem 3rem}
h1{font-size:1.6rem;margin:.5rem 0}h2{font-size:1.25rem;margin-top:2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;display:block;overflow-x:auto;max-width:100%;font-size:13px;margin:.5rem 0}
th,td{border:1px solid #d0d0d0;padding:.25rem .45rem;text-align:left;vertical-align:top}
th{background:#f3f3f3}tr:nth-child(even) td{background:#fafafa}
code{background:#f3f3f3;padding:0 .2rem;border-radius:3px;font-size:.92em}
figure{margin:1rem 0}figure img{width:100%;max-width:900px;height:auto;border:1px solid #eee}
figcaption{font-size:13px;color:#555}.missing{color:#8a5300}
blockquote{border-left:3px solid #c90;margin:.5rem 0;padding:.2rem .8rem;background:#fff8e6}
#answer h2{margin-top:.5rem}#answer ul{padding-left:1.2rem}
.lead{display:flex;gap:.75rem;flex-wrap:wrap}.lead figure{flex:1 1 420px;margin:.25rem 0}
.lead figure img{max-height:420px;object-fit:contain}
details{margin:.5rem 0}summary{cursor:pointer;color:#444}
"""


def _markdown(text: str) -> str:
    from markdown_it import MarkdownIt

    # html off: anything a run saved that looks like markup is shown as text
    md = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable("table")
    return str(md.render(text))


def _sections(markdown: str) -> list[tuple[str, str]]:
    """(section id, Markdown) per ``## `` section (:mod:`lab.render.sections`);
    the part before the first heading has id ``""``."""
    out: list[tuple[str, list[str]]] = [("", [])]
    for line in markdown.splitlines():
        if line.startswith("## "):
            out.append((section_id(line[3:]), [line]))
        else:
            out[-1][1].append(line)
    return [(sid, "\n".join(body)) for sid, body in out]


def _folded(text: str) -> str:
    """A section whose first paragraph sums it up: that paragraph shown,
    the rest folded under it."""
    lines = text.splitlines()
    head = 1 if lines and lines[0].startswith("## ") else 0
    while head < len(lines) and not lines[head].strip():
        head += 1
    end = head
    while end < len(lines) and lines[end].strip():
        end += 1
    rest = "\n".join(lines[end:]).strip()
    if not rest:
        return _markdown(text)
    return (_markdown("\n".join(lines[:end])) + "<details><summary>Detail</summary>\n"
            + _markdown(rest) + "</details>\n")


def figure_html(d: figs.Drawn) -> str:
    fmt = "svg" if "svg" in d.files else "png"
    mime = "image/svg+xml" if fmt == "svg" else "image/png"
    body = base64.b64encode(d.files[fmt]).decode("ascii")
    notes = "".join(f"<br>{html.escape(n)}" for n in d.notes)
    return (f'<figure id="fig-{d.name}"><img src="data:{mime};base64,{body}" alt="{html.escape(d.title)}">'
            f"<figcaption>{html.escape(d.title)}{notes}</figcaption></figure>")


def _left_out_html(left_out: Sequence[str]) -> str:
    if not left_out:
        return ""
    items = "".join(f"<li>{html.escape(x)}</li>" for x in left_out)
    return f'<div class="missing"><p>Figures not drawn:</p><ul>{items}</ul></div>'


def page(title: str, markdown: str, outcome: figs.Outcome, lead: Sequence[figs.Drawn] = ()) -> str:
    """The page: each section in a ``<section>`` of its id, the answer's
    figures (speedup, T(w)) side by side right after it, every other figure
    after the section it belongs to, those of no section (and ``lead``)
    before the first section, and what could not be drawn said where the
    figures start."""
    parts = _sections(markdown)
    ids = {sid for sid, _ in parts}
    placed: dict[str, list[figs.Drawn]] = {}
    top = list(lead)
    answered = ANSWER in ids
    for d in outcome.drawn:
        where = ANSWER if answered and d.name in LEAD_FIGURES else d.section
        if where in ids and where:
            placed.setdefault(where, []).append(d)
        else:
            top.append(d)
    body = []
    for i, (sid, text) in enumerate(parts):
        shown = _folded(text) if sid in FOLDED else _markdown(text)
        if i == 0:
            body.append(shown)
            body.append(_left_out_html(outcome.left_out))
            body += [figure_html(d) for d in top]
            continue
        here = placed.get(sid, ())
        if sid == ANSWER and here:
            shown += '<div class="lead">' + "".join(figure_html(d) for d in here) + "</div>"
        else:
            shown += "".join(figure_html(d) for d in here)
        body.append(f'<section id="{html.escape(sid)}">{shown}</section>\n')
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>\n"
            f"<body><main>\n{''.join(body)}\n</main></body></html>\n")


def render_html(data: Mapping[str, Any]) -> str:
    """A loaded run (:func:`lab.render.report.load_for_report`) as one page."""
    from lab.render.report import render_markdown

    shown = {k: v for k, v in data.items() if k != "figure_lines"}
    outcome = draw.render(data, ("svg",))
    return page(str(data["profile"].get("name") or "run"), render_markdown(shown), outcome)


def render_compare_html(data_a: Mapping[str, Any], data_b: Mapping[str, Any]) -> str:
    """Two loaded runs: the comparison's table after the two overlays."""
    from lab.render.compare import render_compare

    outcome = draw.render_compare(data_a, data_b, formats=("svg",))
    title = f"{data_a['profile'].get('name')} → {data_b['profile'].get('name')}"
    return page(title, render_compare(data_a, data_b, "md"), outcome)
