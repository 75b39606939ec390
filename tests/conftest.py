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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    outcome = yield
    report = outcome.get_result()
    if not _in_ci() or not report.skipped:
        return
    reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if "hardware:" in reason:
        return
    report.outcome = "failed"
    report.longrepr = f"skipped in CI, where nothing may be skipped: {reason}"
