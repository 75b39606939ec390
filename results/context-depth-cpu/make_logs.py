"""Writes the long prompts of this folder: a made-up service log of N lines
(deterministic, seeded), followed by the question. Run from the repository
root: python results/context-depth-cpu/make_logs.py"""

from __future__ import annotations

import random
from pathlib import Path

SERVICES = ("auth", "billing", "search", "upload", "mailer", "cache")
EVENTS = (
    "request served in {ms} ms",
    "cache miss for key user:{n}",
    "retrying call to {svc} (attempt {a})",
    "slow query took {ms} ms",
    "ERROR connection reset by {svc}",
    "WARN queue depth {n}",
    "session {n} expired",
)
QUESTION = ("\n\nAbove is a log from one of our services. List every ERROR line's service and what went wrong, "
            "then say in two sentences whether the slow queries and the errors look related.")


def log(lines: int, seed: int) -> str:
    rng = random.Random(seed)
    out = []
    for i in range(lines):
        svc = rng.choice(SERVICES)
        event = rng.choice(EVENTS).format(ms=rng.randint(3, 900), n=rng.randint(100, 9999), svc=rng.choice(SERVICES),
                                          a=rng.randint(1, 4))
        out.append(f"12:{i // 60 % 60:02d}:{i % 60:02d} {svc:<8} {event}")
    return "\n".join(out)


if __name__ == "__main__":
    here = Path(__file__).parent
    for name, lines in (("log-short", 6), ("log-1k", 48), ("log-2k", 96)):
        (here / f"{name}.txt").write_text("Service log:\n" + log(lines, seed=lines) + QUESTION + "\n", encoding="utf-8")
