"""pytest hooks of pytest-neuronsupport: thin, the work in plain modules.

Without ``--neuron-sweep`` the plugin adds its options and its hookspecs, and nothing else: no
collection, no hooks, no import of torch. With it, ``pytest_configure`` hands the configuration
to :func:`pytest_neuronsupport.configure.configure` (the settings of :mod:`options`, the
runners and modes, built-in and the users', the model lists as the session's collection
arguments), which makes a :class:`~pytest_neuronsupport.session.SweepSession`; it registers
itself and its companion plugins, whose hook methods do the rest.
"""

from __future__ import annotations

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
    """With --neuron-sweep: the sweep's session, configured from the options."""
    if config.getoption("neuron_sweep"):
        from pytest_neuronsupport.configure import configure  # a plain run imports none of it

        configure(config)
