"""Pytest nodes: a model list file collects one item per model, in list order.

The shape of pytest's own non-Python test example: a file collector yielding custom items with
``runtest``, ``repr_failure`` and ``reportinfo``. The work of ``runtest`` is the sweep session's
(:meth:`pytest_neuronsupport.session.SweepSession.run_model`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from pytest_neuronsupport import report
from pytest_neuronsupport.modellist import ModelListError, ModelSpec, parse

if TYPE_CHECKING:
    from pytest_neuronsupport.session import SweepSession  # noqa: F401 (used in a string)

SESSION_KEY = pytest.StashKey["SweepSession"]()


class ModelFailure(Exception):
    """A model's test failed; the message is the whole failure text."""


class ModelListFile(pytest.File):
    """A model list (``*.toml``) named by ``--neuron-models`` or the ``neuron_models`` ini key."""

    def collect(self) -> Iterator[ModelItem]:
        specs = parse(self.path)
        # a model listed in two files would overwrite its own row: refuse it
        self.config.stash[SESSION_KEY].claim(specs)
        for spec in specs:
            yield ModelItem.from_parent(self, name=spec.id, spec=spec)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException]) -> Any:  # type: ignore[override]
        if isinstance(excinfo.value, ModelListError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


class ModelItem(pytest.Item):
    """One model's test: plan, run isolated, classify, record."""

    def __init__(self, *, spec: ModelSpec, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        self.row: dict[str, Any] | None = None
        self.add_marker("neuronsupport")

    def runtest(self) -> None:
        self.config.stash[SESSION_KEY].run_model(self)

    def finish(self, row: dict[str, Any]) -> None:
        """Keep the row for the report, and its key fields as junit properties."""
        self.row = row
        self.user_properties.extend(report.junit_properties(row))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException]) -> Any:  # type: ignore[override]
        if isinstance(excinfo.value, ModelFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, self.spec.line - 1 if self.spec.line else None, f"model {self.spec.id}"
