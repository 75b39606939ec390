"""A temperature > 0 lossless check saved with a run (``lab lossless --run``)
shows in that run's report, drafter by drafter."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

import pytest

from lab import lossless
from lab.analysis.lossless_loader import FILE
from lab.cli import lossless as lossless_command
from lab.profile.load import parse_profile
from lab.render.report import write_report
from lab.runner import Runner
from lab.store import RunStore
from tests.fakes import BASE_AND_SPEC, fake_registry, profile_toml


def fake_check() -> lossless.LosslessReport:
    verdict = lossless.DrafterVerdict(
        drafter="ngram", lossless=True, summary="lossless: no evidence of a difference (p=0.4)", samples=100,
        steps=10, drafted=20, accepted=12, seconds=1.0, tests=[], notes=[])
    broken = lossless.DrafterVerdict(
        drafter="broken", lossless=False, summary="NOT lossless: context story position 1 differs", samples=100,
        steps=10, drafted=20, accepted=19, seconds=1.0, tests=[], notes=[])
    return lossless.LosslessReport(
        backend="llamacpp", model="embedded:smollm2", temperature=0.8, contexts=["story"], samples=100, tokens=5,
        n_max=4, alpha=0.01, permutations=1000, min_detectable_tv=0.21, baseline_seconds=1.0,
        verdicts=[verdict, broken])


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    registry = fake_registry()
    profile = parse_profile(profile_toml(BASE_AND_SPEC), str(tmp_path / "p.toml"), registry)
    store = RunStore(profile, tmp_path / "runs")
    Runner(profile, registry, store).run()
    return Path(store.path)


def args(run: Path) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    lossless_command.add_arguments(parser)
    return parser.parse_args(["-d", "ngram", "--run", str(run)])


def test_the_check_lands_in_the_runs_report(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "Lossless at temperature" not in write_report(run_dir).read_text()
    monkeypatch.setattr(lossless_command, "run_lossless_check", lambda *a, **k: fake_check())
    assert lossless_command.main(args(run_dir)) == 1  # a drafter failed
    assert (run_dir / FILE).is_file()
    report = (run_dir / "report.md").read_text()
    assert "## Lossless at temperature > 0" in report
    assert "- ngram: lossless: no evidence of a difference" in report
    assert "- broken: NOT lossless: context story position 1 differs" in report
    assert asdict(fake_check())["verdicts"][0]["drafter"] == "ngram"


def test_a_directory_that_is_no_run_is_refused_before_sampling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    def never(*a: object, **k: object) -> None:
        raise AssertionError("sampled")

    monkeypatch.setattr(lossless_command, "run_lossless_check", never)
    assert lossless_command.main(args(tmp_path)) == 2
    assert "not a run directory" in capsys.readouterr().err
