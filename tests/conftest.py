"""Fixtures for the plugin's tests: a shared zoo cache, and sweeps run through pytester."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_neuronsupport import zoo
from tests.sweeping import SweepRunner


@pytest.fixture(scope="session")
def zoo_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for the whole test run, shared by xdist workers (the zoo builds under a lock)."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the run's folder, above each worker's own
    cache = base / "neuronsupport-cache"
    cache.mkdir(exist_ok=True)
    for name in zoo.names():
        zoo.ensure_built(name, cache)
    return cache


@pytest.fixture
def sweep(
    pytester: pytest.Pytester, zoo_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> SweepRunner:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return SweepRunner(pytester, zoo_cache)
