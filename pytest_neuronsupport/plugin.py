"""pytest hooks of pytest-neuronsupport: thin, the work in plain modules.

Without ``--neuron-sweep`` the plugin adds its options and its hookspecs, and nothing else: no
collection, no hooks, no import of torch. With it, ``pytest_configure`` resolves the settings
(:mod:`options`), the runners (the built-in ones, and those of the ``pytest_neuronsupport_runners``
hook and of entry points), makes the model lists the session's collection arguments, and
registers a :class:`~pytest_neuronsupport.session.SweepSession`, whose hook methods do the rest.
"""

from __future__ import annotations

import importlib.util

import pytest

from pytest_neuronsupport import options


def pytest_addoption(parser: pytest.Parser) -> None:
    """One option group; each valued flag has an ini key of the same name."""
    group = parser.getgroup("neuronsupport", "model support sweep (pytest-neuronsupport)")
    options.add_options(group.addoption)
    options.add_ini(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """Our hooks for users (:mod:`pytest_neuronsupport.hookspec`)."""
    from pytest_neuronsupport import hookspec

    pluginmanager.add_hookspecs(hookspec)


def pytest_configure(config: pytest.Config) -> None:
    """With --neuron-sweep: settings, runners, the model lists as collection args, the session."""
    if not config.getoption("neuron_sweep"):
        return
    config.addinivalue_line("markers", "neuronsupport: a model of a pytest-neuronsupport sweep")
    # Imported only for a sweep: a plain test run pays nothing for the plugin.
    from pytest_neuronsupport.backends import check_backend
    from pytest_neuronsupport.hookspec import Hooks
    from pytest_neuronsupport.runners import Runners, entry_point_runners
    from pytest_neuronsupport.session import SweepSession
    from pytest_neuronsupport.xdist import XdistHooks, is_worker

    settings = options.settings_from(config)
    if settings.shared is not None and importlib.util.find_spec("boto3") is None:
        raise pytest.UsageError(
            f"neuronsupport: --neuron-results {settings.shared} needs boto3: "
            "pip install 'pytest-neuronsupport[s3]'"
        )
    if not is_worker(config):
        problem = check_backend(settings.backend, settings.device, settings.workdir)
        if problem:
            raise pytest.UsageError(f"neuronsupport: --neuron-backend: {problem}")
    try:
        added = [*entry_point_runners(), *Hooks(config).runners()]
        runners = Runners.builtin().extended(added)
    except (TypeError, ValueError) as exc:
        raise pytest.UsageError(f"neuronsupport: runners: {exc}") from None
    # The model lists are what the session collects, beside any path given explicitly.
    explicit = config.args if config.args_source == pytest.Config.ArgsSource.ARGS else []
    config.args = [str(p) for p in settings.lists] + list(explicit)
    expected = None
    if settings.baseline is not None:
        from pytest_neuronsupport import baseline

        try:
            expected = baseline.read(settings.baseline)
        except baseline.BaselineError as exc:
            raise pytest.UsageError(f"neuronsupport: --neuron-baseline: {exc}") from None
    session = SweepSession(config, settings, runners, baseline=expected)
    config.pluginmanager.register(session, "neuronsupport-session")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistHooks(session), "neuronsupport-xdist")
