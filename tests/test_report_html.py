"""`lab report --format html`: one self-contained page that loads nothing
from the network, opened in a real headless chromium whose screenshot must
show the figures and whose console must stay silent."""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("matplotlib", reason="figures need matplotlib (a base dependency: pip install -e .)")

from lab.cli import main
from lab.render import html as page
from lab.render.report import load_for_report

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "results" / "first-command-cpu"
TWIN_A = ROOT / "results" / "twins-cpu" / "llamacpp-run"
TWIN_B = ROOT / "results" / "twins-cpu" / "mlx-dflash-run"
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--enable-logging=stderr",
                  "--v=0", "--hide-scrollbars")


def _html(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["report", *args, "--format", "html"]) == 0
    out, _ = capsys.readouterr()
    return out


def _loads_nothing(text: str) -> None:
    """No attribute or style points outside the page, and the page's policy
    forbids every fetch but its own data: images."""
    assert f'<meta http-equiv="Content-Security-Policy" content="{page.CSP}">' in text
    assert not re.search(r"""(?:src|href|action|poster|data)\s*=\s*["']?\s*(?:https?:|//|file:)""", text, re.I)
    assert "url(" not in text and "@import" not in text and "<script" not in text.lower()
    srcs = re.findall(r'src="([^"]*)"', text)
    assert srcs and all(s.startswith(("data:image/svg+xml;base64,", "data:image/png;base64,")) for s in srcs)


@pytest.mark.slow
def test_the_demo_page_holds_its_figures_tables_and_arithmetic(capsys: pytest.CaptureFixture[str]) -> None:
    text = _html([str(DEMO)], capsys)
    _loads_nothing(text)
    ids = re.findall(r'<figure id="fig-([\w-]+)">', text)
    assert {"speedup", "verify-cost", "acceptance", "steps"} <= set(ids)
    for src in re.findall(r'src="data:image/svg\+xml;base64,([^"]*)"', text):
        assert base64.b64decode(src).lstrip().startswith(b"<?xml")
    assert "<table>" in text and "Why: the step arithmetic" in text and "Conditions" in text
    # figures follow the section they belong to; the answer's two lead the page
    assert text.index('id="fig-acceptance"') > text.index("<h2>Acceptance per draft position</h2>")
    assert text.index("<h2>The answer</h2>") < text.index('id="fig-speedup"') < text.index('id="fig-verify-cost"')
    assert text.index('id="fig-verify-cost"') < text.index("<h2>Results</h2>")
    # sized for mail
    assert len(text.encode()) < 1_500_000


@pytest.mark.slow
def test_markup_in_a_saved_run_is_shown_never_run(tmp_path: Path) -> None:
    data = load_for_report(DEMO)
    data["results"] = [{**r, "arm": "<img src=x onerror=alert(1)>"} if r["arm"] == "ngram" else r
                       for r in data["results"]]
    data["steps"] = [{**s, "arm": "<img src=x onerror=alert(1)>"} if s["arm"] == "ngram" else s
                     for s in data["steps"]]
    text = page.render_html(data)
    assert "<img src=x" not in text and "&lt;img src=x onerror=alert(1)&gt;" in text
    _loads_nothing(text)


def test_a_page_without_figures_still_carries_the_report(tmp_path: Path) -> None:
    data = load_for_report(DEMO)
    data["results"] = [r for r in data["results"] if r.get("is_baseline")]
    data["steps"] = []
    text = page.render_html(data)
    assert "Figures not drawn:" in text and "no speculative arm finished" in text
    assert "<h2>Detail</h2>" in text


def test_the_compare_page_overlays_both_runs(capsys: pytest.CaptureFixture[str]) -> None:
    text = _html([str(TWIN_A), "--compare", str(TWIN_B)], capsys)
    _loads_nothing(text)
    assert re.findall(r'<figure id="fig-([\w-]+)">', text) == ["compare-speedup", "compare-verify-cost"]
    assert "cells changed" in text


@pytest.mark.slow
def test_figures_flag_draws_into_the_run_and_links_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    shutil.copytree(DEMO, run)
    shutil.rmtree(run / "figures", ignore_errors=True)
    assert main(["report", str(run), "--figures"]) == 0
    md, _ = capsys.readouterr()
    links = re.findall(r"\]\((figures/[\w-]+\.svg)\)", md)
    assert len(links) >= 4 and all((run / link).is_file() for link in links)
    # later renderings of the run link the figures it holds
    assert main(["report", str(run)]) == 0
    again, _ = capsys.readouterr()
    assert re.findall(r"\]\((figures/[\w-]+\.svg)\)", again) == links


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.mark.slow
def test_the_page_renders_in_headless_chromium_offline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    browser = _chromium()
    if browser is None:
        pytest.skip("no chromium: `bash scripts/setup.sh test` installs it on Debian (apt-get install chromium)")
    from PIL import Image

    text = _html([str(DEMO)], capsys)
    target = tmp_path / "report.html"
    target.write_text(text, encoding="utf-8")
    shot = tmp_path / "shot.png"
    # a laptop's width; tall enough for the whole page
    proc = subprocess.run(
        [browser, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,12000",
         f"--screenshot={shot}", target.as_uri()],
        capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    # every console message (a policy violation, a failed load, a script error) is logged as CONSOLE
    console = [ln for ln in proc.stderr.splitlines() if ":CONSOLE" in ln]
    assert console == []
    img = Image.open(shot).convert("RGB")
    assert img.size == (1280, 12000)
    colors = img.getcolors(maxcolors=1 << 20) or []
    assert len(colors) > 50  # text, tables and plotted lines, not one blank color
    # the plots' own colors (matplotlib's tab10 blue, orange, green, purple) are on screen: figures were drawn
    pixels: set[tuple[int, int, int]] = {c for _, c in colors}  # type: ignore[misc]
    for want in ((31, 119, 180), (255, 127, 14), (44, 160, 44), (148, 103, 189)):
        assert any(all(abs(x - y) < 12 for x, y in zip(px, want)) for px in pixels), want


@pytest.mark.slow
def test_the_first_screen_holds_the_answer_and_the_speedup_figure(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """1200x900, as a laptop's browser opens the page: the speedup figure's
    plotted lines are on the first screen, and the answer is above it."""
    browser = _chromium()
    if browser is None:
        pytest.skip("no chromium: `bash scripts/setup.sh test` installs it on Debian (apt-get install chromium)")
    from PIL import Image

    text = _html([str(DEMO)], capsys)
    assert text.index("<h2>The answer</h2>") < text.index('id="fig-speedup"') < text.index("<h2>Results</h2>")
    target = tmp_path / "report.html"
    target.write_text(text, encoding="utf-8")
    shots = {}
    for name, page_text in (("page", text), ("no-figures", re.sub(r'<figure id="fig-[\w-]+">.*?</figure>', "",
                                                                   text, flags=re.S))):
        (tmp_path / f"{name}.html").write_text(page_text, encoding="utf-8")
        shot = tmp_path / f"{name}.png"
        proc = subprocess.run(
            [browser, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,900",
             f"--screenshot={shot}", (tmp_path / f"{name}.html").as_uri()],
            capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(tmp_path)},
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        img = Image.open(shot).convert("RGB")
        assert img.size == (1200, 900)
        shots[name] = {c for _, c in img.getcolors(maxcolors=1 << 20) or []}

    def plotted(pixels: set[tuple[int, int, int]], want: tuple[int, int, int]) -> bool:
        return any(all(abs(x - y) < 12 for x, y in zip(px, want)) for px in pixels)

    # the speedup figure's arms (tab10 blue, orange, green) are drawn on the first screen, and only by it
    for color in ((31, 119, 180), (255, 127, 14), (44, 160, 44)):
        assert plotted(shots["page"], color), color
        assert not plotted(shots["no-figures"], color), color


@pytest.mark.slow
def test_chromium_reports_a_page_that_loads_from_the_network(tmp_path: Path) -> None:
    """The console check above can fail: the same browser flags catch a page
    that tries a fetch (blocked by the same policy) or runs a script."""
    browser = _chromium()
    if browser is None:
        pytest.skip("no chromium: `bash scripts/setup.sh test` installs it on Debian (apt-get install chromium)")
    bad = tmp_path / "bad.html"
    bad.write_text(f'<!doctype html><html><head><meta http-equiv="Content-Security-Policy" content="{page.CSP}">'
                   '</head><body><img src="http://127.0.0.1:9/x.png"></body></html>')
    proc = subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
                           f"--screenshot={tmp_path / 'bad.png'}", bad.as_uri()],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(tmp_path)})
    assert any(":CONSOLE" in ln and "Content Security Policy" in ln for ln in proc.stderr.splitlines())
