"""A sweep configured from pytest's options, once, in ``pytest_configure`` (only with
``--neuron-sweep``): the settings (:mod:`settings`, from the option table), the results store,
the backend and the device checked before anything runs (by the controller), the runners and
modes (built-in, from entry points and the users' hooks), the model lists as the session's
collection arguments, the baseline, the compile cache's bucket (``--neuron-compile-cache``,
opened by the controller); then the :class:`~pytest_neuronsupport.session.SweepSession` that
runs the sweep, registered with its companion plugins.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_neuronsupport import baseline, compilecache, lanes, modes, xdist
from pytest_neuronsupport.dataset.stores import ResultsError, check_folder, open_store
from pytest_neuronsupport.dataset.tables import register
from pytest_neuronsupport.modellist import ModelListError, check_model_id, parse_lists
from pytest_neuronsupport.runners import Runners
from pytest_neuronsupport.session import SweepSession

if TYPE_CHECKING:
    from pytest_neuronsupport.settings import Settings


def configure(config: pytest.Config) -> SweepSession:
    """The sweep's session, from the options: settings, runners, modes, the model lists as
    the session's collection arguments, the baseline; registered as a plugin
    (:meth:`SweepSession.register`). Bad options, and every problem of the model lists, are
    a ``UsageError`` naming them (the file and line of each)."""
    from pytest_neuronsupport.settings import settings_from

    config.addinivalue_line("markers", "neuronsupport: a model of a pytest-neuronsupport sweep")
    xdist.tie_to_controller(config)
    settings = settings_from(config)
    try:
        store = open_store(settings.shared or settings.results, settings.cache)
    except ResultsError as exc:
        raise pytest.UsageError(f"neuronsupport: --neuron-results {exc}") from None
    runners, sweep_modes = extensions(config)
    try:  # every problem of the lists at once, before anything is imported or started
        lists = parse_lists(settings.lists, runners)
    except ModelListError as exc:
        raise pytest.UsageError(*(f"neuronsupport: {p}" for p in exc.problems)) from None
    compile_cache = None if xdist.is_worker(config) else check_the_run(settings, config)
    # The model lists are what the session collects, beside any path given explicitly.
    explicit = config.args if config.args_source == pytest.Config.ArgsSource.ARGS else []
    config.args = [str(p) for p in settings.lists] + list(explicit)
    try:
        expected = baseline.load(settings.baseline, settings.baseline_uri)
    except baseline.BaselineError as exc:
        raise pytest.UsageError(*(f"neuronsupport: {p}" for p in exc.problems)) from None
    session = SweepSession(
        config, settings, runners, sweep_modes, store, lists=lists, baseline=expected
    )
    session.compile_cache = compile_cache
    session.register()
    return session


def extensions(config: pytest.Config) -> tuple[Runners, list[modes.Mode]]:
    """The runners and modes, built-in and the users' (their tables registered)."""
    from pytest_neuronsupport.runners import entry_point_runners

    try:
        hook = config.hook
        added = [*entry_point_runners(), *users(hook.pytest_neuronsupport_runners, config)]
        runners = Runners.builtin().extended(added)
        sweep_modes = [*modes.builtin_modes(), *users(hook.pytest_neuronsupport_modes, config)]
        for mode in sweep_modes:
            register(mode.table)
    except (TypeError, ValueError) as exc:
        raise pytest.UsageError(f"neuronsupport: runners and modes: {exc}") from None
    return runners, sweep_modes


def check_the_run(settings: Settings, config: pytest.Config) -> compilecache.SharedCache | None:
    """The controller's checks before anything runs: the folders it writes besides the
    results, the backend, lanes with the session's options, the compile cache's bucket
    (opened: :func:`shared_cache`), the environment the runs inherit (a ``UsageError`` naming
    what is wrong). The compile cache, if any."""
    from pytest_neuronsupport.backends import check_backend

    for option, folder in (
        ("--neuron-cache", settings.cache),
        ("--neuron-leases", settings.leases),
    ):
        try:  # else every model would fail on it, a row each
            check_folder(folder)
        except ResultsError as exc:
            raise pytest.UsageError(f"neuronsupport: {option} {exc}") from None
    problem = judge_problem(settings.judge, settings.workdir)
    if problem:  # else every decoder's check would fail on it, unchecked
        raise pytest.UsageError(f"neuronsupport: --neuron-judge {settings.judge!r}: {problem}")
    problem = check_backend(settings.backend, settings.device, settings.workdir)
    if problem:
        raise pytest.UsageError(f"neuronsupport: --neuron-backend: {problem}")
    problem = lanes.refused(settings.lanes, config)
    if problem:
        raise pytest.UsageError(f"neuronsupport: {problem}")
    compile_cache = None if config.option.collectonly else shared_cache(settings)
    problem = settings.device.check(os.environ)  # what the runs inherit
    if problem:
        device = settings.device.name
        raise pytest.UsageError(f"neuronsupport: --neuron-device {device}: {problem}")
    return compile_cache


def shared_cache(settings: Settings) -> compilecache.SharedCache | None:
    """The compile cache shared through a bucket (``--neuron-compile-cache``), opened: the
    bucket made if missing and the token may; else a usage error naming it, before any test."""
    if settings.compile_cache is None:
        return None
    shared = settings.device.shared_cache(settings.cache, settings.backend)
    if shared is None:
        raise pytest.UsageError(
            f"neuronsupport: --neuron-compile-cache: the {settings.device.name} device keeps "
            f"no compile cache to share with backend {settings.backend} (the neuron device's "
            "NEFF cache, compiled by the neuron backend)"
        )
    try:
        return compilecache.open_cache(settings.compile_cache, shared[1], shared[0])
    except compilecache.CompileCacheError as exc:
        raise pytest.UsageError(f"neuronsupport: --neuron-compile-cache {exc}") from None


def users(hook: Any, config: pytest.Config) -> list[Any]:
    """What the users' implementations of a hook that returns a list (runners, modes) return,
    in one list."""
    return [item for items in hook(config=config) for item in items]


def judge_problem(judge: str | None, workdir: Path) -> str | None:
    """Why ``--neuron-judge`` names no judge (None: it names one, or none is wanted): a local
    folder, a zoo model, or a Hub id (``id@revision``)."""
    if judge is None or (workdir / judge).is_dir():
        return None
    return check_model_id(judge.split("@", 1)[0])
