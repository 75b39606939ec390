"""Shared test settings.

In CI (CI=true) a skipped test is a failure: CI installs every engine the
tests need, so a skip there means a missing install step, not a missing
machine. Skips whose reason starts with "hardware:" (a GPU, Apple Silicon)
are the exception."""

from __future__ import annotations

import os

import pytest


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _fail_skip_in_ci(report: pytest.TestReport | pytest.CollectReport, where: str) -> None:
    if not _in_ci() or not report.skipped:
        return
    reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if "hardware:" in reason:
        return
    report.outcome = "failed"
    report.longrepr = f"{where} skipped in CI, where nothing may be skipped: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    outcome = yield
    _fail_skip_in_ci(outcome.get_result(), item.nodeid)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    # A module-level importorskip skips while the module is collected, before
    # any test report exists: that is the skip a missing engine would cause.
    outcome = yield
    _fail_skip_in_ci(outcome.get_result(), collector.nodeid)
