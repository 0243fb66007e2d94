"""The hooks pytest-neuronsupport offers its users, registered with ``pytest_addhooks``.

Implement them in a ``conftest.py`` or a plugin (docs/extending.md has an example of each):

* :func:`pytest_neuronsupport_runners`: add runners (each a
  :class:`~pytest_neuronsupport.runners.Runner` whose run code is in a module of yours);
* :func:`pytest_neuronsupport_modes`: add modes (each a
  :class:`~pytest_neuronsupport.modes.Mode`: another test of each model, with a table of its
  own);
* :func:`pytest_neuronsupport_verdict`: replace a model's result;
* :func:`pytest_neuronsupport_row`: add or change the fields of a model's row before it is
  recorded (extra columns go into the parquet file and the junit properties).

The verdict and row hooks run in the process that ran the model (an xdist worker, under
``-n``), once per model that was tried, excluded models included.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_neuronsupport.modellist import ModelSpec
    from pytest_neuronsupport.modes import Mode
    from pytest_neuronsupport.runners import Runner


@pytest.hookspec
def pytest_neuronsupport_runners(config: pytest.Config) -> Sequence[Runner]:
    """Return runners to add to the built-in ones (called once, when the sweep is configured).

    A runner's ``name`` must be new; its ``module`` is any importable module whose ``run`` (or
    the runner's ``entry``) is its run code, and ``architectures`` and ``tasks`` make it the
    runner of the checkpoints that match them (a list entry may also name it: ``runner =``).
    """
    raise NotImplementedError  # a specification: pluggy never calls it


@pytest.hookspec
def pytest_neuronsupport_modes(config: pytest.Config) -> Sequence[Mode]:
    """Return modes to add to the built-in ones (called once, when the sweep is configured).

    A mode is another test of the models its ``wanted`` accepts, run after the built-in ones
    for each entry, with rows of its own in its ``table`` (a
    :class:`~pytest_neuronsupport.dataset.table.Table` whose name and folder are new): see
    :mod:`pytest_neuronsupport.modes` for what a mode implements.
    """
    raise NotImplementedError  # a specification: pluggy never calls it


@pytest.hookspec(firstresult=True)
def pytest_neuronsupport_verdict(
    row: dict[str, Any], spec: ModelSpec, config: pytest.Config
) -> str | None:
    """Return a result (``"PASS"``, ``"FAIL(output)"``, ``"EXCLUDED"``...) to replace the
    model's, or None to keep it.

    ``row`` holds every number that decided the verdict (``cpu_match``, ``check``...). The
    replaced result is kept in the ``check`` column (``"overridden"``); the test passes, fails
    or is skipped by the new one.
    """


@pytest.hookspec
def pytest_neuronsupport_row(row: dict[str, Any], spec: ModelSpec, config: pytest.Config) -> None:
    """Add or change fields of the model's row (a dict, changed in place) before it is recorded.

    A key the dataset does not know is a new column: its name is ``[A-Za-z_][A-Za-z0-9_]*`` and
    its value None, a str, bool, int or float. A row that no longer fits the schema is recorded
    as FAIL(other), the problem in ``error``.
    """
