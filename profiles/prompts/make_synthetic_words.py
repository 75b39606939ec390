"""Writes prompts of an exact length for the project's synthetic models:
N words of three lowercase letters, seeded. Every such word is one piece of
the synthetic vocabulary (lab_llamacpp.synthetic: the word-start mark and
one to four letters), so a prompt of N words is N tokens after BOS. The
oracle drafter replays what the target picks, so the words' meaning does not
matter: only the depth they fill. Run from the repository root:
    python profiles/prompts/make_synthetic_words.py"""

from __future__ import annotations

import random
import string
from pathlib import Path

LENGTHS = {"synthetic-512": 512, "synthetic-8k": 8192, "synthetic-32k": 32768}


def words(n: int, seed: int) -> str:
    rng = random.Random(seed)
    letters = string.ascii_lowercase
    out = ["".join(rng.choice(letters) for _ in range(3)) for _ in range(n)]
    # one line: a line break is a byte token of its own, not a piece
    return " ".join(out)


if __name__ == "__main__":
    here = Path(__file__).parent
    for name, n in LENGTHS.items():
        (here / f"{name}.txt").write_text(words(n, seed=n), encoding="utf-8")
