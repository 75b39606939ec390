"""The GPU check's page: what each part of the stage gave, from its files.

    python3 scripts/device/gpu_check.py DIR RUN_ROOT...

DIR holds what the gpu_check stage wrote (commit.txt, card.txt, NAME.rc,
NAME.txt, decode-overhead.txt); each RUN_ROOT holds one `lab run`'s run
directory. Prints README.md: the commit and the card, then per run its exit
code, every row's status, whether report.md and the figures were written,
then decode_overhead's summary. Exit 0 when every part passed."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def _results(run: Path) -> dict:
    for name in ("results.json", "results.json.gz"):
        f = run / name
        if f.is_file():
            if name.endswith(".gz"):
                import gzip

                return json.loads(gzip.decompress(f.read_bytes()))
            return json.loads(f.read_text(encoding="utf-8"))
    return {}


def run_part(name: str, root: Path, rc: str) -> tuple[list[str], bool]:
    runs = sorted(p for p in root.glob("*") if p.is_dir())
    lines = [f"### {name}", ""]
    if not runs:
        return lines + [f"exit code {rc or '?'}; no run directory in {root}", ""], False
    run = runs[-1]
    data = _results(run)
    rows = data.get("results", [])
    figures = sorted(p.name for p in (run / "figures").glob("*.svg")) if (run / "figures").is_dir() else []
    report = (run / "report.md").is_file()
    not_drawn = "Not drawn" in _read(run / "report.md")
    ok = rc == "0" and bool(rows) and all(r.get("status") == "ok" for r in rows) and report and bool(figures)
    lines += [f"`lab run` exit code {rc}; {len(rows)} rows; report.md {'written' if report else 'MISSING'}; "
              f"figures: {len(figures)} drawn{' (some not drawn: see its report)' if not_drawn else ''}; "
              f"run directory `{run.name}`", "",
              "| arm | prompt | round | status | tok/s | speedup | detail |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        speed = r.get("speedup")
        tps = r.get("tok_per_s")
        detail = (r.get("detail") or "").splitlines()[0][:80] if r.get("detail") else ""
        lines.append(f"| {r.get('arm')} | {r.get('prompt')} | {r.get('round')} | {r.get('status')} | "
                     f"{tps:.1f} | {f'{speed:.2f}x' if isinstance(speed, (int, float)) else ''} | {detail} |"
                     if isinstance(tps, (int, float)) else
                     f"| {r.get('arm')} | {r.get('prompt')} | {r.get('round')} | {r.get('status')} |  |  | {detail} |")
    return lines + [""], ok


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    roots = [Path(a) for a in argv[1:]]
    lines = ["# GPU check", "",
             "The lab's default path on a CUDA card (scripts/device/, stage `gpu_check`): plain `lab run` and "
             "`python -m lab run`, no wrapper, no environment override; every row must be `ok`, report.md and the "
             "figures written, exit 0.", "",
             f"- commit: `{_read(out / 'commit.txt') or '?'}`",
             f"- card: {_read(out / 'card.txt') or '?'}", ""]
    passed = True
    for root in roots:
        name = root.name
        part, ok = run_part(name, root, _read(out / f"{name}.rc"))
        lines += part
        passed = passed and ok
    overhead = _read(out / "decode-overhead.txt")
    rc = _read(out / "decode-overhead.rc")
    lines += ["### decode_overhead", "", f"exit code {rc or '?'}", "", "```",
              *[ln for ln in overhead.splitlines() if not ln.startswith("repeat ")][-24:], "```", ""]
    passed = passed and rc == "0"
    lines += [f"**{'passed' if passed else 'FAILED'}**", ""]
    print("\n".join(lines))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
