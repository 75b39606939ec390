"""Paired order ([run] order = "paired", the default): each arm's cell runs
right after its baseline's cell of the same prompt and round, so a speedup
compares cells seconds apart; and a load that starts half-way through a run
moves the paired speedup less than the arm-by-arm order's, measured on the
real engine with a burner started mid-run."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lab.base.cells import Status
from lab.base.events import Finished, RunEvent, StatusChanged
from lab.profile.load import parse_profile
from lab.registry import load_registry
from lab.runner import Runner
from tests.test_llamacpp_inprocess import PROMPTS

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[llamacpp]')")
pytestmark = pytest.mark.engine


def profile(order: str, rounds: int, prompts: str = PROMPTS, max_tokens: int = 24, threads: int = 2,
            more: str = "") -> str:
    return (f'[run]\nmax_tokens = {max_tokens}\nrounds = {rounds}\nwarmup = 1\nn_ctx = 512\nprobe = false\n'
            f'threads = {threads}\norder = "{order}"\n{more}' + prompts +
            '[[arms]]\nname = "base"\nbackend = "llamacpp"\nmodel = "embedded:smollm2"\n'
            '[[arms]]\nname = "ngram"\nbackend = "llamacpp"\nmodel = "embedded:smollm2"\ndrafter = "ngram"\nn_max = 4\n'
            '[[arms]]\nname = "oracle"\nbackend = "llamacpp"\nmodel = "embedded:smollm2"\ndrafter = "oracle"\nn_max = 4\n')


def run(text: str, tmp_path: Path, listen: Any = None) -> tuple[list[Any], list[RunEvent]]:
    registry = load_registry()
    events: list[RunEvent] = []

    def hear(event: RunEvent) -> None:
        events.append(event)
        if listen is not None:
            listen(event)

    p = parse_profile(text, str(tmp_path / "p.toml"), registry)
    return Runner(p, registry, None, [hear]).run(), events


def test_each_arms_cell_runs_beside_its_baselines(tmp_path: Path) -> None:
    rows, events = run(profile("paired", 2), tmp_path)
    assert {r.status for r in rows} == {Status.OK}
    started = [(e.cell.arm, e.cell.prompt, e.cell.round) for e in events
               if isinstance(e, StatusChanged) and e.status == Status.RUNNING and e.cell.round >= 1
               and e.phase == "running"]
    started = list(dict.fromkeys(started))
    # slot by slot: the baseline's cell of a prompt and round, then both arms' of the same
    for i in range(0, len(started), 3):
        slot = started[i:i + 3]
        assert slot[0][0] == "base" and {s[0] for s in slot[1:]} == {"ngram", "oracle"}, started
        assert len({(s[1], s[2]) for s in slot}) == 1, started
    # the arms take turns going first
    seconds = [started[i + 1][0] for i in range(0, len(started), 3)]
    assert len(set(seconds)) == 2, started
    # and each row's speedup is against the baseline cell beside it
    done = {(e.cell.arm, e.cell.prompt, e.cell.round): e.t for e in events if isinstance(e, Finished)}
    for (arm, prompt, rnd), t in done.items():
        if arm != "base":
            assert done[("base", prompt, rnd)] < t
    # the run says how it ordered its cells
    planned = [e for e in events if type(e).__name__ == "OrderPlanned"]
    assert planned and planned[0].order == "paired" and planned[0].groups[0]["resident"] == ["base", "ngram", "oracle"]


def test_arms_order_runs_one_arm_after_another(tmp_path: Path) -> None:
    _, events = run(profile("arms", 1), tmp_path)
    started = list(dict.fromkeys(e.cell.arm for e in events if isinstance(e, StatusChanged)
                                 and e.status == Status.RUNNING and e.cell.round >= 1))
    assert started == ["base", "ngram", "oracle"]


BURN = "while True: pass"


ONE = '[[prompts]]\nname = "prose"\ntext = "Write a long story about a lighthouse keeper and the sea."\n'


def _speedups(rows: list[Any], arm: str) -> list[float]:
    return [r.speedup for r in rows if r.arm == arm and r.speedup is not None]


@pytest.mark.alone
def test_a_load_started_mid_run_moves_the_paired_speedup_less(tmp_path: Path) -> None:
    """One engine thread, and from half-way two burning programs a core:
    every cell after that gets a share of a core, the baseline's and the
    arm's alike (with one thread no barrier stalls favour either), so a
    paired speedup keeps its value where an arm-by-arm one takes the load's
    factor. Each order runs the same cells (no rounds added for noise)."""
    def text(order: str) -> str:
        return profile(order, 4, ONE, 64, threads=1, more="max_rounds = 4\n")

    quiet, _ = run(text("paired"), tmp_path)
    reference = statistics.median(_speedups(quiet, "oracle"))
    moved: dict[str, float] = {}
    got: dict[str, list[float]] = {}
    for order in ("paired", "arms"):
        burners: list[subprocess.Popen[bytes]] = []
        finished = [0]

        def listen(event: RunEvent, burners: list[subprocess.Popen[bytes]] = burners,
                   finished: list[int] = finished) -> None:
            if isinstance(event, Finished):
                finished[0] += 1
                # half-way (6 of 12 cells): other programs, each in a session of its own as a
                # user's are (the kernel shares a core between sessions first), two a core
                if finished[0] == 6:
                    for _ in range(2 * (os.cpu_count() or 2)):
                        burners.append(subprocess.Popen([sys.executable, "-c", BURN], start_new_session=True))

        try:
            rows, _ = run(text(order), tmp_path, listen)
        finally:
            for b in burners:
                b.kill()
                b.wait()
        got[order] = _speedups(rows, "oracle")
        moved[order] = abs(statistics.median(got[order]) - reference) / reference
    said = (f"quiet paired speedup {reference:.2f}x; with a burner from half-way: paired {got['paired']} "
            f"(median moved {moved['paired']:.0%}), arm by arm {got['arms']} (moved {moved['arms']:.0%})")
    assert moved["paired"] < moved["arms"], said
    print(said)
