"""Terminal safety: what profiles, engines and saved runs say reaches the
terminal with every control sequence escaped, visible, not acted on."""

from __future__ import annotations

import io
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from lab.base.textsafe import PrintableStream, printable

HOSTILE = [
    "\x1b[2J", "\x1b]52;c;aGVsbG8=\x07", "\x1b]0;title\x1b\\", "\x9b31m", "\x07", "\x00", "\x7f", "\u202e", "\u200b",
    "\r", "\x08", "\ufeff", "\U000e0001",
]


@pytest.mark.parametrize("code", list(range(0x20)) + list(range(0x7F, 0xA0)))
def test_every_c0_and_c1_control_is_escaped(code: int) -> None:
    text = f"a{chr(code)}b"
    out = printable(text)
    assert chr(code) not in out
    assert out == f"a\\x{code:02x}b"


@pytest.mark.parametrize("text", HOSTILE)
def test_sequences_are_shown_escaped(text: str) -> None:
    out = printable(f"name{text}end")
    assert out.isprintable(), repr(out)
    assert out.startswith("name") and out.endswith("end")


def test_printable_text_is_unchanged() -> None:
    for text in ("plain", "名前 café ñ", "tab-free line", "emoji 🙂", "a\\x1b literal backslash"):
        assert printable(text) == text


def test_newlines_and_tabs_are_kept_only_when_asked() -> None:
    assert printable("a\nb\tc") == "a\\x0ab\\x09c"
    assert printable("a\nb\tc\x1b", keep="\n\t") == "a\nb\tc\\x1b"


def test_non_strings_print_as_their_str() -> None:
    assert printable(Path("/x/\x1by")) == "/x/\\x1by"
    assert printable(3) == "3"


def test_the_stream_escapes_what_listeners_write() -> None:
    buf = io.StringIO()
    PrintableStream(buf).write("  [arm\x1b[2J p r1] error \x1b]52;c;x\x07\n")
    assert buf.getvalue() == "  [arm\\x1b[2J p r1] error \\x1b]52;c;x\\x07\n"


def test_unassigned_and_private_use_are_escaped() -> None:
    unassigned = next(chr(c) for c in range(0x0378, 0x10000) if unicodedata.category(chr(c)) == "Cn")
    assert printable(unassigned + "\ue000").isascii()


@pytest.mark.slow
def test_an_engine_error_echoing_a_profile_value_reaches_the_terminal_escaped(tmp_path: Path) -> None:
    """A llama-server arm whose raw argument carries an OSC 52 clipboard
    write and a screen clear: the server refuses the argument and echoes it;
    `lab run` prints the failure with the sequences escaped."""
    from lab_llamacpp_server.binary import ServerNotFound, server_info

    try:
        server_info(None)
    except ServerNotFound as exc:
        pytest.skip(f"no llama-server: {exc}")
    profile = tmp_path / "p.toml"
    profile.write_text(
        '[profile]\nname = "inject"\n\n[run]\nmax_tokens = 4\nrounds = 1\nwarmup = 0\n\n'
        '[[prompts]]\nname = "p"\ntext = "Hi"\n\n'
        '[[arms]]\nname = "base"\nbackend = "llamacpp-server"\nmodel = "embedded:smollm2"\n'
        'options = { extra_args = ["--no-such-flag\\u001b]52;c;aGk=\\u0007\\u001b[2J"] }\n'
    )
    res = subprocess.run([sys.executable, "-m", "lab.cli", "run", str(profile), "--out", str(tmp_path / "runs")],
                         capture_output=True, text=True, timeout=300)
    assert "Traceback" not in res.stderr
    assert "error" in res.stdout
    # the sequences are in what the run saved (the server's own words)...
    from lab.store import load_run

    (run,) = (tmp_path / "runs").iterdir()
    assert any("\x1b]52" in r["detail"] for r in load_run(run)["results"])
    # ...and in nothing the lab printed of it
    outs = [res.stdout, res.stderr]
    for fmt in ("md", "csv"):
        rep = subprocess.run([sys.executable, "-m", "lab.cli", "report", str(run), "--format", fmt],
                             capture_output=True, text=True, timeout=300)
        assert rep.returncode == 0, rep.stderr
        outs += [rep.stdout, rep.stderr]
    for stream in outs:
        assert "\x1b" not in stream and "\x07" not in stream
