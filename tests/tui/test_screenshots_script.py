"""scripts/screenshots.py, which makes docs/tui.md's pictures, runs and
writes two SVGs of the run screen at their sizes with Quit and Help in
the footer."""

from __future__ import annotations

import importlib.util
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_screenshot_script_writes_both_svgs(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("lab_screenshots", ROOT / "scripts" / "screenshots.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    written = module.main(str(tmp_path))
    assert sorted(p.name for p in written) == ["tui-100x30.svg", "tui-80x24.svg"]
    for path in written:
        root = ET.parse(path).getroot()  # well-formed SVG
        assert root.tag.endswith("svg")
        text = " ".join(t for t in root.itertext())
        words = " ".join(text.replace("\xa0", " ").split())
        assert "Quit" in words and "Help" in words, path.name
        assert re.search(r"demo", words), path.name
    live = " ".join(ET.parse(tmp_path / "tui-80x24.svg").getroot().itertext()).replace("\xa0", " ")
    assert "paused" in live and "rejected" in live  # the held run and the legend of its marks
