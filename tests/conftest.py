"""Fixtures for the plugin's tests: a shared zoo cache, and sweeps run through pytester."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_neuronsupport import zoo
from tests.sweeping import SweepRunner


@pytest.fixture(scope="session")
def zoo_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for the whole test run, shared by xdist workers (the zoo builds under a lock).

    It also imports torch and transformers in every worker, outside any test: a module first
    imported inside a test that uses pytester is dropped from ``sys.modules`` when that test
    ends (pytester restores its snapshot), and a second import of torch.distributed's
    functional collectives registers their operators again (a warning, then a RuntimeError).
    A worker whose zoo another worker built would otherwise import them first in such a test.
    """
    import transformers.modeling_utils  # noqa: F401  (torch, torch.distributed.tensor)

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
